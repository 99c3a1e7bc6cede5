"""The calendar domain: days, hour slots and meetings."""

from envace.worlds.base import DomainSpec, Shape
from envace.worlds.calendar import tasks
from envace.worlds.calendar.db import PEOPLE, CalendarDB, random_calendar
from envace.worlds.calendar.tools import CalendarTools
from envace.worlds.calendar.verifier import VERIFIER

DOMAIN = DomainSpec(
    name="calendar",
    system_prompt="You manage a calendar. Use the tools.",
    db_cls=CalendarDB,
    toolkit_cls=CalendarTools,
    random_db=random_calendar,
    vocab={"person": PEOPLE},
    shapes=(
        Shape("check", "person", 1, tasks.check),
        Shape("book", "person", 1, tasks.book),
        Shape("cancel", "person", 1, tasks.cancel),
        Shape("pair", "person", 2, tasks.pair),
        Shape("book_if_free", "person", 1, tasks.book_if_free),
        Shape("two_turn", "person", 1, tasks.two_turn),
    ),
    verifier=VERIFIER,
)
