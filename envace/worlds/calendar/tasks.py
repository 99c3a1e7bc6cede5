"""Calendar task shapes. Preconditions (the person has / has no meeting, a slot is free / taken) are
set on the random database before the conversation starts."""

from __future__ import annotations

import random
from typing import cast

from envace.worlds.builder import TaskBuilder
from envace.worlds.calendar.db import HOURS, PEOPLE, CalendarDB


def _db(b: TaskBuilder) -> CalendarDB:
    return cast(CalendarDB, b.db)


def _ensure_events(db: CalendarDB, rng: random.Random, people: list[str]) -> None:
    """Give each of `people` a meeting by handing them someone else's (ids stay random)."""
    for person in people:
        if db.event_of(person) is None:
            spare = [eid for eid, e in sorted(db.active().items()) if e.person not in people]
            db.events[rng.choice(spare)].person = person


def _ensure_no_event(db: CalendarDB, person: str) -> None:
    eid = db.event_of(person)
    if eid is not None:
        busy = {e.person for e in db.active().values()}
        db.events[eid].person = next(p for p in PEOPLE if p not in busy)


def _when(r: dict) -> str:
    return f"{r['person']}: {r['day']} {r['hour']}"


def check(b: TaskBuilder, keys: list[str], rng: random.Random) -> None:
    (person,) = keys
    _ensure_events(_db(b), rng, [person])
    b.user(f"When is the meeting of {person}?")
    r = b.call("find_event", person=person)
    b.reply(_when(r), answers=[_when(r)])


def book(b: TaskBuilder, keys: list[str], rng: random.Random) -> None:
    (person,) = keys
    _ensure_no_event(_db(b), person)
    day, hour = rng.choice(_db(b).free_slots())
    b.user(f"Book {person} on {day} at {hour}.")
    b.call("book", person=person, day=day, hour=hour)
    b.reply(f"Booked {person} on {day} at {hour}.")


def cancel(b: TaskBuilder, keys: list[str], rng: random.Random) -> None:
    (person,) = keys
    _ensure_events(_db(b), rng, [person])
    b.user(f"Cancel the meeting of {person}.")
    r = b.call("find_event", person=person)
    b.call("cancel_event", event=r["event"])
    b.reply(f"Cancelled {r['event']}.")


def pair(b: TaskBuilder, keys: list[str], rng: random.Random) -> None:
    p, q = keys
    _ensure_events(_db(b), rng, [p, q])
    b.user(f"When are the meetings of {p} and {q}?")
    rp, rq = b.calls([("find_event", {"person": p}), ("find_event", {"person": q})])
    answers = [_when(rp), _when(rq)]
    b.reply(", ".join(answers), answers=answers)


def book_if_free(b: TaskBuilder, keys: list[str], rng: random.Random) -> None:
    """Book at hour h, or h+1 when h is taken; both hours are in the request, so no arithmetic."""
    (person,) = keys
    db = _db(b)
    _ensure_no_event(db, person)
    day, hour = rng.choice([(d, h) for d, h in db.free_slots() if h + 1 in HOURS and db.at(d, h + 1) is None])
    if rng.random() < 0.5:
        # take slot h with someone else's meeting so the fallback branch is needed
        mover = rng.choice(sorted(db.active()))
        db.events[mover].day, db.events[mover].hour = day, hour
    b.user(f"Book {person} on {day} at {hour}, or at {hour + 1} if {hour} is taken.")
    r = b.call("who_at", day=day, hour=hour)
    chosen = hour if r["person"] is None else hour + 1
    b.call("book", person=person, day=day, hour=chosen)
    b.reply(f"Booked {person} on {day} at {chosen}.")


def two_turn(b: TaskBuilder, keys: list[str], rng: random.Random) -> None:
    (person,) = keys
    _ensure_events(_db(b), rng, [person])
    b.user(f"Look up the meeting of {person}.")  # not check's wording: test pairs must not leak through here
    r = b.call("find_event", person=person)
    b.reply(_when(r), answers=[_when(r)])
    b.user("Cancel it.")
    b.call("cancel_event", event=r["event"])
    b.reply(f"Cancelled {r['event']}.")

