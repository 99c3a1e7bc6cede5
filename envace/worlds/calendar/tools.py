"""Calendar tools: look a meeting up by person or by slot, book one, cancel one by id. Responses copy
values from the state or the call; booking answers without the new id (an id the caller would have to
predict is a guess, not a copy)."""

from __future__ import annotations

from typing import Any

from envace.worlds.base import ToolError, Toolkit, read_tool, write_tool
from envace.worlds.calendar.db import DAYS, HOURS, PEOPLE, CalendarDB, Event


class CalendarTools(Toolkit):
    db: CalendarDB

    @staticmethod
    def _slot(day: str, hour: int) -> None:
        if day not in DAYS:
            raise ToolError(f"unknown day {day!r}; days are {list(DAYS)}")
        if hour not in HOURS:
            raise ToolError(f"hour {hour} is outside {HOURS[0]}-{HOURS[-1]}")

    @read_tool
    def find_event(self, person: str) -> dict[str, Any]:
        """Find the meeting of a person.

        Args:
            person: person name
        """
        eid = self.db.event_of(person)
        if eid is None:
            raise ToolError(f"{person!r} has no meeting")
        e = self.db.events[eid]
        return {"person": person, "event": eid, "day": e.day, "hour": e.hour}

    @read_tool
    def who_at(self, day: str, hour: int) -> dict[str, Any]:
        """Who has the slot at a day and hour (null if free).

        Args:
            day: weekday
            hour: hour
        """
        self._slot(day, hour)
        eid = self.db.at(day, hour)
        return {"day": day, "hour": hour, "person": None if eid is None else self.db.events[eid].person}

    @write_tool
    def book(self, person: str, day: str, hour: int) -> dict[str, Any]:
        """Book a meeting for a person.

        Args:
            person: person name
            day: weekday
            hour: hour
        """
        if person not in PEOPLE:
            raise ToolError(f"unknown person {person!r}; people are {list(PEOPLE)}")
        self._slot(day, hour)
        taken = self.db.at(day, hour)
        if taken is not None:
            raise ToolError(f"{day} {hour} is taken by {self.db.events[taken].person}")
        mine = self.db.event_of(person)
        if mine is not None:
            raise ToolError(f"{person} already has meeting {mine}; cancel it first")
        self.db.events[f"e{len(self.db.events) + 1}"] = Event(person=person, day=day, hour=hour)
        return {"ok": True, "person": person, "day": day, "hour": hour}

    @write_tool
    def cancel_event(self, event: str) -> dict[str, Any]:
        """Cancel a meeting.

        Args:
            event: event id
        """
        e = self.db.events.get(event)
        if e is None:
            raise ToolError(f"unknown event {event!r}; known events: {sorted(self.db.events)}")
        if e.status != "active":
            raise ToolError(f"event {event!r} is already {e.status}")
        e.status = "cancelled"
        return {"ok": True, "event": event, "status": "cancelled"}
