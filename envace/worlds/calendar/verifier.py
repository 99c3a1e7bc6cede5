"""Calendar verifier: compares *who meets when* (the set of active (person, day, hour) meetings), not
raw event ids. Departure from a raw comparison: cancelling a meeting and booking the same slot again
gives it a new id but the same calendar, and that is counted as the same end state."""

from __future__ import annotations

from typing import Any

from envace.worlds.base import WorldDB
from envace.worlds.calendar.db import CalendarDB
from envace.worlds.calendar.tools import CalendarTools
from envace.worlds.verify import StateVerifier


class CalendarVerifier(StateVerifier):
    def canonical(self, db: WorldDB) -> dict[str, Any]:
        assert isinstance(db, CalendarDB)
        meetings = sorted(f"{e.person} {e.day} {e.hour}" for e in db.active().values())
        return {"meetings": meetings}


VERIFIER = CalendarVerifier(CalendarDB, CalendarTools)
