"""WorldEnvironment: the built-in tool world as an `envace.types.Environment`.

`execute` never raises. Model output is untrusted, so an unknown tool, arguments that do not fit the
schema, and any exception inside a tool all become an error `Observation` whose content is
`{"error": "<what went wrong>"}` — an ordinary observation the policy can read and react to.

`final_reward` is the verifiable task-success check: 1.0 when the end database equals the one the
gold calls produce (canonical comparison, see each domain's verifier) and every user turn's final reply
states that turn's gold answer values; otherwise 0.0. Answers are checked per turn (not only in the last
reply) because a two-turn task may ask for a value in its first turn.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from envace.conversation import contains_phrase, split_turns
from envace.toolcall import check_arguments
from envace.types import ErrorCode, Message, Observation, Role, Task, ToolCall, Trajectory
from envace.worlds.base import DomainSpec, Toolkit, WorldDB
from envace.worlds.builder import dumps_response
from envace.worlds.registry import get_domain


@dataclass
class FinalCheck:
    state_ok: bool
    state_diff: list[str] = field(default_factory=list)
    missing_answers: list[tuple[int, str]] = field(default_factory=list)  # (user turn, value)

    @property
    def reward(self) -> float:
        return 1.0 if self.state_ok and not self.missing_answers else 0.0


def _error(code: ErrorCode, message: str) -> Observation:
    return Observation(content={"error": message}, source=Role.ENV, error=code, detail=message)


def replay_gold(task: Task) -> WorldDB:
    """The end state the task's gold calls produce from its initial state."""
    return get_domain(task.domain).verifier.gold_end_state(task)


def missing_answers(task: Task, messages: list[Message]) -> list[tuple[int, str]]:
    """(turn, value) for every gold answer value the turn's final reply does not state."""
    answers: list[list[str]] = task.meta.get("answers", [])
    turns = split_turns(messages)
    out = []
    for t, values in enumerate(answers):
        reply = turns[t].final_reply if t < len(turns) else ""
        out.extend((t, v) for v in values if not contains_phrase(reply, v))
    return out


class WorldEnvironment:
    """One episode of the tool world. `reset(task)` loads the task's initial state."""

    def __init__(self) -> None:
        self.task: Task | None = None
        self.domain: DomainSpec | None = None
        self.db: WorldDB | None = None
        self._kit: Toolkit | None = None
        self.calls_executed = 0  # every call that reached execute(), failed ones included

    def reset(self, task: Task) -> None:
        if task.initial_state is None:
            raise ValueError(f"task {task.uuid!r} has no initial_state; WorldEnvironment runs tool-world tasks "
                             f"only (generate them with envace.worlds.generator.generate_tasks)")
        self.domain = get_domain(task.domain)
        self.task = task
        self.db = self.domain.db_cls.from_dict(task.initial_state)
        self._kit = self.domain.toolkit_cls(self.db)
        self.calls_executed = 0

    def _require(self) -> tuple[Task, DomainSpec, WorldDB, Toolkit]:
        if self.task is None or self.domain is None or self.db is None or self._kit is None:
            raise RuntimeError("WorldEnvironment used before reset(task)")
        return self.task, self.domain, self.db, self._kit

    def execute(self, call: ToolCall) -> Observation:
        task, _, _, kit = self._require()
        self.calls_executed += 1
        try:
            name, args = call.name, call.arguments
            if not isinstance(name, str) or name not in task.tool_names():
                return _error(ErrorCode.UNKNOWN_TOOL,
                              f"tool {name!r} is not available; tools: {sorted(task.tool_names())}")
            if not isinstance(args, dict):
                return _error(ErrorCode.INVALID_PARAMETERS, f"arguments of {name!r} must be an object")
            bad = check_arguments(ToolCall(name, args), task.tools)
            if bad is not None:
                return _error(bad[0], bad[1])
            result = kit.invoke(name, dict(args))
            dumps_response(result)  # a result that cannot be rendered is a tool bug: report it as one
            return Observation(content=result, source=Role.ENV)
        except Exception as exc:  # noqa: BLE001 - the boundary: every tool failure is an observation
            return _error(ErrorCode.TOOL_ERROR, str(exc) or type(exc).__name__)

    def state(self) -> dict[str, Any]:
        return self._require()[2].to_dict()

    def state_hash(self) -> str:
        return self._require()[2].digest()

    def final_check(self, trajectory: Trajectory) -> FinalCheck:
        task, domain, db, _ = self._require()
        if trajectory.task.uuid != task.uuid:
            raise ValueError(f"trajectory is for task {trajectory.task.uuid!r} but the environment was reset "
                             f"with {task.uuid!r}")
        verdict = domain.verifier.check(task, db)
        return FinalCheck(verdict.ok, verdict.diff, missing_answers(task, trajectory.messages))

    def final_reward(self, trajectory: Trajectory) -> float:
        return self.final_check(trajectory).reward
