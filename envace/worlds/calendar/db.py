"""Calendar database: meetings (events e1..e9) of a closed set of people on weekdays and hours 9–16.

Invariant kept by the tools: a person has at most one active meeting and a (day, hour) slot holds at
most one, so `find_event(person)` and `who_at(day, hour)` have a single answer.
"""

from __future__ import annotations

import random
from typing import Literal

from pydantic import BaseModel, ConfigDict

from envace.worlds.base import WorldDB

PEOPLE = ("ann", "bob", "cal", "dan", "eve", "fay", "gus", "hal")
DAYS = ("mon", "tue", "wed", "thu", "fri")
HOURS = tuple(range(9, 17))


class Event(BaseModel):
    model_config = ConfigDict(extra="forbid")
    person: str
    day: str
    hour: int
    status: Literal["active", "cancelled"] = "active"


class CalendarDB(WorldDB):
    events: dict[str, Event]

    def active(self) -> dict[str, Event]:
        return {eid: e for eid, e in self.events.items() if e.status == "active"}

    def event_of(self, person: str) -> str | None:
        for eid, e in sorted(self.active().items(), key=lambda kv: int(kv[0][1:])):
            if e.person == person:
                return eid
        return None

    def at(self, day: str, hour: int) -> str | None:
        for eid, e in self.active().items():
            if e.day == day and e.hour == hour:
                return eid
        return None

    def free_slots(self) -> list[tuple[str, int]]:
        return [(d, h) for d in DAYS for h in HOURS if self.at(d, h) is None]


def random_calendar(rng: random.Random) -> CalendarDB:
    """3–5 people with one meeting each at distinct slots; ids shuffled so they carry no position."""
    people = rng.sample(PEOPLE, rng.randint(3, 5))
    slots = rng.sample([(d, h) for d in DAYS for h in HOURS], len(people))
    ids = [f"e{i + 1}" for i in range(len(people))]
    rng.shuffle(ids)
    events = {eid: Event(person=p, day=d, hour=h) for eid, p, (d, h) in zip(ids, people, slots, strict=True)}
    return CalendarDB(events=events)
