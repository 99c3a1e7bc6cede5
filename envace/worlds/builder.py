"""TaskBuilder: records a gold conversation by *executing* each gold call on the domain's toolkit, so
every tool message in a task is exactly what the real environment answers, and derives the task's
CM2-style checklist from the calls and answers.

Checklist items (one list per user turn), each with a machine-checkable rule in `extra_info["rule"]`:
one `call` item per gold call (name + exact arguments), one `reply_contains` item per answer value,
and, where a turn's gold path deliberately skips a write (the "condition false" branch), one `no_call`
item for that tool — without it the checklist could not tell the two branches apart. Weights are equal
and sum to 1 per turn. An item is `required_for_next_turn` when a later turn's call uses a value that
item's call returned (e.g. the order id found in turn 1 and cancelled in turn 2); `dependence` lists the
items whose responses a call's arguments come from.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from envace.types import ChecklistItem, Message, Task, ToolCall
from envace.worlds.base import DomainSpec, WorldDB


def dumps_response(resp: Any) -> str:
    """The exact text of a tool message (also what WorldEnvironment observations render to)."""
    return json.dumps(resp, sort_keys=True)


def _args_text(args: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in args.items())


@dataclass
class _CallRecord:
    item_id: str
    call: ToolCall
    step: int
    returned: set[str]
    depends: list[str]


@dataclass
class _TurnRecord:
    calls: list[_CallRecord] = field(default_factory=list)
    answers: list[str] = field(default_factory=list)
    forbid: list[str] = field(default_factory=list)
    steps: int = 0


class TaskBuilder:
    """Set up preconditions on `db`, then `user()`, `call()`/`calls()`, `reply()` per turn, then `build()`."""

    def __init__(self, domain: DomainSpec, db: WorldDB) -> None:
        self.domain = domain
        self.db = db  # mutable until the first user() call: shapes adjust it to meet preconditions
        self._initial: dict[str, Any] | None = None
        self._kit = None
        self._messages: list[Message] = [Message("system", domain.system_prompt)]
        self._turns: list[_TurnRecord] = []

    # -- recording ---------------------------------------------------------------------------------
    def user(self, text: str) -> None:
        if self._initial is None:
            self._initial = self.db.to_dict()
            self._kit = self.domain.toolkit_cls(self.db.clone())
        self._messages.append(Message("user", text))
        self._turns.append(_TurnRecord())

    def call(self, name: str, **arguments: Any) -> dict[str, Any]:
        return self.calls([(name, arguments)])[0]

    def calls(self, specs: list[tuple[str, dict[str, Any]]]) -> list[dict[str, Any]]:
        """Several calls in one assistant message, each followed by its tool message."""
        if self._kit is None or not self._turns:
            raise RuntimeError("call() before user(): a conversation starts with a user message")
        turn = self._turns[-1]
        tool_calls = [ToolCall(name, dict(args)) for name, args in specs]
        self._messages.append(Message("assistant", "", tool_calls=tool_calls))
        earlier = [r for t in self._turns for r in t.calls]
        results = []
        for tc in tool_calls:
            resp = self._kit.invoke(tc.name, dict(tc.arguments))  # a gold call that fails is a bug: raise
            self._messages.append(Message("tool", dumps_response(resp), name=tc.name))
            arg_values = {str(v) for v in tc.arguments.values()}
            depends = [r.item_id for r in earlier if arg_values & r.returned]
            returned = {str(v) for v in resp.values() if isinstance(v, str)} - arg_values
            item_id = f"t{len(self._turns) - 1}_call{len(turn.calls)}"
            turn.calls.append(_CallRecord(item_id, tc, turn.steps, returned, depends))
            results.append(resp)
        turn.steps += 1
        return results

    def reply(self, text: str, answers: list[str] | None = None, forbid: list[str] | None = None) -> None:
        turn = self._turns[-1]
        for value in answers or []:
            if value.lower() not in text.lower():
                raise ValueError(f"gold reply {text!r} does not contain its answer {value!r}")
        turn.answers = list(answers or [])
        turn.forbid = list(forbid or [])
        self._messages.append(Message("assistant", text))
        turn.steps += 1

    # -- output ------------------------------------------------------------------------------------
    def _checklists(self) -> list[list[ChecklistItem]]:
        needed_later = {d for t in self._turns for r in t.calls for d in r.depends}
        out: list[list[ChecklistItem]] = []
        for ti, turn in enumerate(self._turns):
            items: list[ChecklistItem] = []
            last = ti == len(self._turns) - 1
            for r in turn.calls:
                args_json = json.dumps(r.call.arguments, sort_keys=True)
                items.append(ChecklistItem(
                    id=r.item_id,
                    question=f"Does the assistant call {r.call.name} with {_args_text(r.call.arguments)}?",
                    pass_condition=f"A call to {r.call.name} in this turn has exactly the arguments {args_json}.",
                    focus_on="assistant.tool_calls",
                    required_for_next_turn=(not last) and r.item_id in needed_later,
                    evidence=[{"turn": ti, "step": r.step, "from": "assistant.tool_calls",
                               "snippet": f"{r.call.name}({args_json})"}],
                    failure_examples=[f"{r.call.name} is not called", f"{r.call.name} is called with other values"],
                    dependence=list(r.depends),
                    extra_info={"rule": {"kind": "call", "name": r.call.name, "arguments": dict(r.call.arguments)}},
                ))
            for k, value in enumerate(turn.answers):
                items.append(ChecklistItem(
                    id=f"t{ti}_ans{k}",
                    question=f"Does the final reply state '{value}'?",
                    pass_condition=f"The reply to the user contains '{value}'.",
                    focus_on="assistant.content.user_visible_reply",
                    evidence=[{"turn": ti, "step": turn.steps - 1, "from": "assistant.content.user_visible_reply",
                               "snippet": value}],
                    failure_examples=["the value is missing", "a different value is given"],
                    extra_info={"rule": {"kind": "reply_contains", "text": value}},
                ))
            for k, name in enumerate(turn.forbid):
                items.append(ChecklistItem(
                    id=f"t{ti}_skip{k}",
                    question=f"Does the assistant avoid calling {name}?",
                    pass_condition=f"No call to {name} is made in this turn.",
                    focus_on="assistant.tool_calls",
                    failure_examples=[f"{name} is called although the condition does not hold"],
                    extra_info={"rule": {"kind": "no_call", "name": name}},
                ))
            for it in items:
                it.weight = 1.0 / len(items)
            out.append(items)
        return out

    @property
    def answers(self) -> list[list[str]]:
        return [list(t.answers) for t in self._turns]

    def build(self, uuid: str, meta: dict[str, Any]) -> Task:
        if self._initial is None:
            raise RuntimeError("build() before user(): the shape recorded no conversation")
        return Task(
            uuid=uuid,
            tools=self.domain.toolkit_cls.schemas(),
            messages=list(self._messages),
            checklists=self._checklists(),
            domain=self.domain.name,
            initial_state=self._initial,
            meta={**meta, "answers": self.answers},
        )
