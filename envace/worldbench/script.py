"""Recording one task: its script of gold calls executed in a fresh environment, plus perturbed calls.

A source turns each benchmark task into a `TaskScript`: the tools, the opening messages, and a sequence
of steps (`Step`, envace.benchmarks.transitions: the records every adapter's transitions.py returns), each
a conversation message (BFCL's turns) or a gold call. `record_task` executes the gold calls in
order in one environment (`Executor`, built fresh by the script's factory), one transition per call with
the conversation so far; then, for each perturbation kind, one seeded call position where the
perturbation applies: a NEW environment replays the gold calls before it and executes the perturbed
call, so a perturbed call that succeeds never changes what the later gold calls see.

The conversation shown for a call holds the opening messages, the user messages so far and, per earlier
gold call, an assistant message with that call and a tool message with the real response text.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from envace.benchmarks.transitions import Executor, Step
from envace.worldbench.perturb import perturb
from envace.worldbench.records import CallKind, Source, Split, Transition

PERTURBED_KINDS = (CallKind.WRONG_ID, CallKind.OUT_OF_RANGE, CallKind.MISSING_ARG)


@dataclass
class TaskScript:
    source: Source
    domain: str
    task_id: str
    split: Split
    tools: list[dict[str, Any]]
    steps: list[Step]
    new_executor: Callable[[], Executor]
    opening: list[dict[str, Any]] = field(default_factory=list)
    result_schemas: dict[str, dict[str, Any]] = field(default_factory=dict)  # tool name -> declared result schema


def task_rng(seed: int, *parts: Any) -> random.Random:
    digest = hashlib.sha256("|".join(map(str, ("worldbench", seed, *parts))).encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


def _call_messages(call: dict[str, Any], call_id: str, response: str) -> list[dict[str, Any]]:
    return [{"role": "assistant", "content": "",
             "tool_calls": [{"id": call_id, "type": "function",
                             "function": {"name": call["name"], "arguments": json.dumps(call["arguments"],
                                                                                        ensure_ascii=False)}}]},
            {"role": "tool", "tool_call_id": call_id, "name": call["name"], "content": response}]


def _transition(s: TaskScript, position: int, kind: CallKind, history: list[dict[str, Any]], call: dict[str, Any],
                response: str, is_error: bool, requestor: str) -> Transition:
    return Transition(id=f"{s.source.value}/{s.domain}/{s.task_id}/{position}/{kind.value}", source=s.source,
                      domain=s.domain, task_id=str(s.task_id), split=s.split, position=position, kind=kind,
                      tools=s.tools, history=[dict(m) for m in history], call=call, response=response,
                      is_error=bool(is_error), result_schema=s.result_schemas.get(call["name"]),
                      meta={"requestor": requestor} if requestor != "assistant" else {})


def _replay(s: TaskScript, upto: int | None) -> tuple[Executor, list[dict[str, Any]], list[tuple]]:
    """Run the script's gold calls (all, or those before call position `upto`) in a new environment:
    (the environment, the conversation at that point, [(position, history, step, text, is_error)])."""
    env = s.new_executor()
    history = list(s.opening)
    done: list[tuple] = []
    position = 0
    for step in s.steps:
        if step.message is not None:
            history.append(step.message)
            continue
        if upto is not None and position == upto:
            break
        text, is_error = env.execute(step.call, step.requestor)  # type: ignore[arg-type]
        done.append((position, list(history), step, text, is_error))
        history += _call_messages(step.call, f"call_{position}", text)  # type: ignore[arg-type]
        position += 1
    return env, history, done


def record_task(s: TaskScript, seed: int, perturbed: bool = True) -> list[Transition]:
    """Gold transitions of every call, then up to one perturbed transition per kind (see the docstring)."""
    _, _, done = _replay(s, None)
    out = [_transition(s, pos, CallKind.GOLD, hist, step.call, text, err, step.requestor)
           for pos, hist, step, text, err in done]
    if not perturbed:
        return out
    calls = [(pos, step) for pos, _, step, _, _ in done]
    for kind in PERTURBED_KINDS:
        rng = task_rng(seed, s.source.value, s.domain, s.task_id, kind.value)
        order = list(calls)
        rng.shuffle(order)
        for pos, step in order:
            changed = perturb(kind, step.call, s.tools, rng)
            if changed is None:
                continue
            env, history, _ = _replay(s, pos)
            text, err = env.execute(changed, step.requestor)
            out.append(_transition(s, pos, kind, history, changed, text, err, step.requestor))
            break
    return out
