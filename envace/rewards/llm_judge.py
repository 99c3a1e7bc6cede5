"""Checklist judge over any chat backend (an OpenAI-compatible endpoint serving e.g. Qwen3-30B-A3B, as
in the EnvACE reference; or any object with the `ChatBackend.chat` method).

One judge call per (user turn, checklist item), with a strict JSON schema whose last field is
`answer: bool`. Departure from the reference, which judges every assistant *step* of a turn against
every item (an item passes if it passes at any step): here the judge sees the whole turn at once — one
call instead of one per step, and the item's `focus_on` tells it where to look. A call that raises or
returns something that is not a verdict is retried with exponential backoff (`ask_until_parsed`, the loop
other judges share); when all attempts fail the episode score is None with a typed `JudgeFailure` (the
episode is then JUDGE_ERROR), never 0.
Each failure is classified (`JudgeErrorKind`): UNPARSEABLE when the backend answered with something that
is not a verdict, BACKEND when the backend raised (endpoint unreachable or refusing, a local model
refusing the request); the judge counts failed attempts and failed items per kind for run metrics.
Later turns are not judged once a required_for_next_turn item has ended the episode.

Backends come from a model slot (`envace.engines.slots.ModelSlot.build_judge`): a local model dir served
in-process or an OpenAI-compatible endpoint, judged alike.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from envace.conversation import TurnView, split_turns
from envace.rewards.checklist import (
    ChecklistScore,
    JudgeErrorKind,
    JudgeFailure,
    TurnVerdicts,
    all_checklists,
    judge_failed,
    score_episode,
    turn_gate,
)
from envace.types import ChecklistItem, Message, Task, Trajectory

# Plain JSON Schema of one verdict; the backend wraps it in its API's response_format (named by title).
VERDICT_SCHEMA: dict[str, Any] = {
    "title": "checklist_verdict",
    "type": "object",
    "properties": {
        "analysis_of_focus": {"type": "string"},
        "analysis_of_pass_condition": {"type": "string"},
        "answer": {"type": "boolean"},
    },
    "required": ["analysis_of_focus", "analysis_of_pass_condition", "answer"],
    "additionalProperties": False,
}

JUDGE_SYSTEM = (
    "You grade one checklist item about an AI assistant that talks to a user and calls tools. "
    "Read the conversation and decide whether the item passes for the given user turn. Reply with a JSON "
    "object: analysis_of_focus (what the assistant did where the item says to look), "
    "analysis_of_pass_condition (whether that meets the pass condition), answer (true or false)."
)


@runtime_checkable
class ChatBackend(Protocol):
    def chat(self, messages: list[dict], *, json_schema: dict | None, temperature: float) -> str: ...


def ask(backend: Any, messages: list[dict], json_schema: dict | None, temperature: float) -> Any:
    """One judge request. A backend with `complete(...) -> str` (envace's OpenAI-compatible client, whose
    `chat` returns a rich result) is asked through `complete`; otherwise through `chat`."""
    complete = getattr(backend, "complete", None)
    if callable(complete):
        return complete(messages, json_schema=json_schema, temperature=temperature)
    return backend.chat(messages, json_schema=json_schema, temperature=temperature)


class JudgeError(RuntimeError):
    def __init__(self, failure: JudgeFailure) -> None:
        super().__init__(f"judge failed on turn {failure.turn}, item {failure.item_id!r} after "
                         f"{failure.attempts} attempts: {failure.error}")
        self.failure = failure


@dataclass(frozen=True)
class JudgeSettings:
    attempts: int = 5  # the reference retries 5 times
    base_delay_s: float = 1.0  # wait base · 2^k before retry k+1
    max_delay_s: float = 30.0
    temperature: float = 0.6  # the reference judge samples at 0.6

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError(f"attempts = {self.attempts}: set attempts >= 1")
        if self.base_delay_s < 0 or self.max_delay_s < 0:
            raise ValueError("base_delay_s and max_delay_s must be >= 0")


def render_transcript(turns: list[TurnView], upto: int) -> str:
    lines: list[str] = []
    for turn in turns[: upto + 1]:
        lines.append(f"--- user turn {turn.index + 1} ---")
        lines.append(f"[user] {turn.user}")
        for m in turn.messages:
            if m.role == "assistant":
                if m.content:
                    lines.append(f"[assistant] {m.content}")
                lines.extend(f"[assistant tool_call] {c.name}({json.dumps(c.arguments, sort_keys=True)})"
                             for c in m.tool_calls)
            elif m.role == "tool":
                lines.append(f"[tool {m.name or ''}] {m.content}")
    return "\n".join(lines)


def item_prompt(turns: list[TurnView], turn_index: int, item: ChecklistItem) -> list[dict[str, str]]:
    fails = "\n".join(f"- {f}" for f in item.failure_examples) or "- (none given)"
    user = (f"Conversation:\n{render_transcript(turns, turn_index)}\n\n"
            f"Checklist item for user turn {turn_index + 1} (judge only that turn):\n"
            f"Question: {item.question}\nLook at: {item.focus_on}\nPass condition: {item.pass_condition}\n"
            f"Failure examples:\n{fails}")
    return [{"role": "system", "content": JUDGE_SYSTEM}, {"role": "user", "content": user}]


def judge_json(text: Any) -> tuple[Any, str]:
    """A judge reply's JSON value (a fenced ```json block is accepted) and the text it was read from.
    Raises ValueError (json.JSONDecodeError is one) for a reply that is not text or not JSON."""
    if not isinstance(text, str):
        raise ValueError(f"judge returned {type(text).__name__}, not text")
    body = text.strip()
    if body.startswith("```"):
        body = body.strip("`").removeprefix("json").strip()
    return json.loads(body), body


def parse_verdict(text: Any) -> bool:
    """The `answer` of a verdict. Raises ValueError for anything that is not one."""
    obj, body = judge_json(text)
    if not isinstance(obj, dict) or not isinstance(obj.get("answer"), bool):
        raise ValueError(f"verdict has no boolean 'answer': {body[:200]!r}")
    return obj["answer"]


class RetriesExhausted(RuntimeError):
    """Every attempt of one judge request failed; `kind` and `error` are the last attempt's."""

    def __init__(self, kind: JudgeErrorKind, error: str, attempts: int) -> None:
        super().__init__(f"judge gave no usable reply in {attempts} attempts ({kind.value}): {error}")
        self.kind, self.error, self.attempts = kind, error, attempts


def ask_until_parsed(backend: Any, messages: list[dict], json_schema: dict | None, parse: Callable[[Any], Any],
                     settings: JudgeSettings, sleep: Callable[[float], None] = time.sleep,
                     counter: Any = None) -> Any:
    """`parse(reply)` of the first attempt whose request succeeds and whose reply parses; exponential backoff
    between attempts. A raising backend is BACKEND, a reply `parse` refuses (ValueError) is UNPARSEABLE;
    `counter` (an object with `calls` and a `failed_attempts` Counter, e.g. an LLMJudge) counts both.
    Raises RetriesExhausted when every attempt failed."""
    last, kind = "", JudgeErrorKind.BACKEND
    for attempt in range(settings.attempts):
        if attempt:
            sleep(min(settings.max_delay_s, settings.base_delay_s * 2 ** (attempt - 1)))
        if counter is not None:
            counter.calls += 1
        try:
            reply = ask(backend, messages, json_schema, settings.temperature)
        except Exception as exc:  # noqa: BLE001 - any backend failure is retried, then recorded
            last, kind = f"{type(exc).__name__}: {exc}", JudgeErrorKind.BACKEND
        else:
            try:
                return parse(reply)
            except (ValueError, RecursionError) as exc:  # json.JSONDecodeError is a ValueError
                last, kind = f"{type(exc).__name__}: {exc}", JudgeErrorKind.UNPARSEABLE
        if counter is not None:
            counter.failed_attempts[kind] += 1
    raise RetriesExhausted(kind, last, settings.attempts)


class LLMJudge:
    def __init__(self, backend: ChatBackend, settings: JudgeSettings | None = None,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.backend = backend
        self.settings = settings or JudgeSettings()
        self.sleep = sleep  # injectable so tests do not wait
        self.calls = 0
        self.failed_attempts: Counter[JudgeErrorKind] = Counter()  # attempts that gave no verdict
        self.failed_items: Counter[JudgeErrorKind] = Counter()  # items undecided after every attempt

    def metrics(self) -> dict[str, float]:
        """Counters since construction, as `judge/*` run metrics (the caller takes differences per step)."""
        m = {"judge/calls": float(self.calls), "judge/failed_items": float(sum(self.failed_items.values()))}
        for kind in (JudgeErrorKind.UNPARSEABLE, JudgeErrorKind.BACKEND):
            m[f"judge/failed_attempts_{kind.value}"] = float(self.failed_attempts[kind])
            m[f"judge/failed_items_{kind.value}"] = float(self.failed_items[kind])
        return m

    def judge_item(self, turns: list[TurnView], turn_index: int, item: ChecklistItem) -> bool:
        try:
            return ask_until_parsed(self.backend, item_prompt(turns, turn_index, item), VERDICT_SCHEMA, parse_verdict,
                                    self.settings, self.sleep, self)
        except RetriesExhausted as exc:
            self.failed_items[exc.kind] += 1
            raise JudgeError(JudgeFailure(turn=turn_index, item_id=item.id, attempts=exc.attempts, error=exc.error,
                                          kind=exc.kind)) from None

    def score_messages(self, task: Task, messages: list[Message]) -> ChecklistScore:
        sets = all_checklists(task)
        if not sets:
            raise ValueError(f"task {task.uuid!r} has no checklists to judge")
        turns = split_turns(messages)[: len(sets[0])]
        verdicts: list[TurnVerdicts] = []
        try:
            for turn in turns:
                passed = [{it.id: self.judge_item(turns, turn.index, it) for it in s[turn.index]} for s in sets]
                verdicts.append(TurnVerdicts(passed=passed, tool_failed=turn.tool_failed))
                if not turn_gate([s[turn.index] for s in sets], passed):
                    break
        except JudgeError as exc:
            return judge_failed(sets, exc.failure)
        return score_episode(sets, verdicts)

    def score(self, trajectory: Trajectory) -> ChecklistScore:
        return self.score_messages(trajectory.task, trajectory.messages)
