"""Final-state verification shared by every domain: replay the gold calls of a task on its initial
state and compare the result with the end state of an episode.

Success is judged on the end state, as in tau2-bench, not on the call sequence: any sequence of calls
that leaves the database as the gold sequence does counts. A domain may compare a *canonical* view of
its database instead of the raw one (calendar ignores the ids of events created and cancelled again);
it overrides `canonical`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from envace.types import Task, ToolCall
from envace.worlds.base import Toolkit, WorldDB


@dataclass
class Verdict:
    ok: bool
    diff: list[str] = field(default_factory=list)  # dotted paths where end state and gold differ


def _diff(a: Any, b: Any, path: str, out: list[str]) -> None:
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b), key=str):
            _diff(a.get(k, "<missing>"), b.get(k, "<missing>"), f"{path}.{k}" if path else str(k), out)
    elif a != b:
        out.append(f"{path or '<root>'}: got {a!r}, gold {b!r}")


class StateVerifier:
    """Replays gold calls with a domain's toolkit and compares canonical end states."""

    def __init__(self, db_cls: type[WorldDB], toolkit_cls: type[Toolkit]) -> None:
        self.db_cls = db_cls
        self.toolkit_cls = toolkit_cls

    def canonical(self, db: WorldDB) -> dict[str, Any]:
        return db.to_dict()

    def replay(self, initial_state: dict[str, Any], calls: list[ToolCall]) -> WorldDB:
        """Run `calls` in order on a fresh copy of `initial_state`. Gold calls must not fail: a ToolError
        here means the task itself is broken, so it propagates."""
        db = self.db_cls.from_dict(initial_state)
        kit = self.toolkit_cls(db)
        for call in calls:
            kit.invoke(call.name, dict(call.arguments))
        return db

    def gold_end_state(self, task: Task) -> WorldDB:
        if task.initial_state is None:
            raise ValueError(f"task {task.uuid!r} has no initial_state; only tool-world tasks can be verified")
        return self.replay(task.initial_state, [c for turn in task.gold_calls() for c in turn])

    def check(self, task: Task, end_state: WorldDB) -> Verdict:
        out: list[str] = []
        _diff(self.canonical(end_state), self.canonical(self.gold_end_state(task)), "", out)
        return Verdict(ok=not out, diff=out)
