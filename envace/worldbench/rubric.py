"""Rubric judge: an LLM grades each predicted tool response against the real one on five dimensions.

Dimensions (integers 1-5 from the judge, reported rescaled to [0, 1] as (score - 1) / 4):
- `format`: a well-formed JSON value shaped like the real response (type, keys, value types);
- `factuality`: the values it states (ids, amounts, names, statuses) agree with the real response;
- `consistency`: it agrees with the call's arguments and with what the conversation already established;
- `realism`: a real system of this kind could have returned it (an error where the real tool errs);
- `quality`: overall, how well it would stand in for the real response for an agent's next step.
The judge sees the call, the tool's schema, the last messages of the conversation, the real response and
the prediction (as parsed; the raw text when it does not parse), and answers one JSON object. The prompt
is envace's own.

Any OpenAI-compatible endpoint (or a local model dir) serves as judge, through a model slot
(envace.engines.slots.ModelSlot.build_judge: the endpoint client with its transport retries). Each request
is retried with backoff by the checklist judge's loop (envace.rewards.llm_judge.ask_until_parsed). A
transition whose replies never parse is a classified failure (`unparseable_verdict`): left out of the means
and counted, never scored 0. A judge that cannot be reached (`backend_failure` after every attempt) stops
the run with RubricJudgeError, and so does a run in which no verdict parsed at all: a dead judge is an
error, not a low score.

Departure from AgentWorldBench's rubric judging (arXiv 2606.24597): the same five dimension names with our
own definitions and prompt, a 1-5 scale, one request per transition and no reasoning trace requested.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import numpy as np

from envace.rewards.llm_judge import judge_json
from envace.worldbench.intervals import interval_summary
from envace.worldbench.records import Transition
from envace.worldbench.score import TransitionScore

DIMENSIONS = ("format", "factuality", "consistency", "realism", "quality")
HISTORY_MESSAGES = 6
MAX_CHARS = 1500

RUBRIC_SYSTEM = (
    "You review a tool simulator. A simulator was asked to answer one tool call in place of the real tool. "
    "You are given the call, the tool's schema, the recent conversation, the response the REAL tool returned "
    "and the SIMULATED response. Grade the simulated response against the real one, each dimension an "
    "integer from 1 (worst) to 5 (best):\n"
    "format: it is valid JSON with the real response's structure (same kind of value, same keys, same value "
    "types);\n"
    "factuality: the concrete values it states (ids, numbers, names, dates, statuses) match the real "
    "response;\n"
    "consistency: it fits the call's arguments and everything the conversation already established;\n"
    "realism: a real system of this kind could plausibly have answered this way; it reports an error when "
    "the real tool reported one, and only then;\n"
    "quality: overall, an agent deciding its next step would be as well served by it as by the real "
    "response.\n"
    "Judge only the simulated response. Answer with one JSON object and nothing else: "
    '{"format": n, "factuality": n, "consistency": n, "realism": n, "quality": n}'
)

VERDICT_SCHEMA: dict[str, Any] = {
    "title": "rubric_verdict", "type": "object",
    "properties": {d: {"type": "integer", "minimum": 1, "maximum": 5} for d in DIMENSIONS},
    "required": list(DIMENSIONS), "additionalProperties": False,
}


class RubricJudgeError(RuntimeError):
    """The judge could not be used (unreachable, or no verdict parsed): the run stops."""


def _cut(text: str, limit: int = MAX_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _schema(t: Transition) -> Any:
    for tool in t.tools:
        fn = tool.get("function", tool)
        if fn.get("name") == t.tool:
            return fn
    return None


def rubric_messages(t: Transition, prediction: Any, predicted_text: str) -> list[dict[str, str]]:
    """The judge's chat for one transition (see RUBRIC_SYSTEM)."""
    lines = []
    for m in t.history[-HISTORY_MESSAGES:]:
        calls = [c.get("function", c) for c in m.get("tool_calls") or []]
        said = (m.get("content") or "") + "".join(f" [call {c.get('name')} {c.get('arguments')}]" for c in calls)
        lines.append(f"{m.get('role')}: {_cut(said.strip(), 400)}")
    simulated = json.dumps(prediction, ensure_ascii=False, sort_keys=True) if prediction is not None \
        else f"(not valid JSON) {predicted_text}"
    user = "\n\n".join([
        f"Tool schema:\n{_cut(json.dumps(_schema(t), ensure_ascii=False, sort_keys=True))}",
        "Recent conversation:\n" + ("\n".join(lines) or "(none)"),
        f"Call:\n{json.dumps(t.call, ensure_ascii=False, sort_keys=True)}",
        f"REAL response:\n{_cut(json.dumps(t.value, ensure_ascii=False, sort_keys=True))}",
        f"SIMULATED response:\n{_cut(simulated)}",
    ])
    return [{"role": "system", "content": RUBRIC_SYSTEM}, {"role": "user", "content": user}]


def parse_rubric(text: Any) -> dict[str, int]:
    """{dimension: 1..5}; ValueError for anything else (a fenced JSON block is accepted)."""
    obj, body = judge_json(text)
    if not isinstance(obj, dict):
        raise ValueError(f"verdict is not a JSON object: {body[:200]!r}")
    out = {}
    for d in DIMENSIONS:
        v = obj.get(d)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v != int(v) or not 1 <= v <= 5:
            raise ValueError(f"verdict field {d!r} is {v!r}, not an integer 1-5: {body[:200]!r}")
        out[d] = int(v)
    return out


@dataclass
class RubricResult:
    scores: list[tuple[TransitionScore, dict[str, int]]] = field(default_factory=list)
    failures: list[tuple[str, str, str]] = field(default_factory=list)  # (transition id, kind, error)
    requests: int = 0


def judge_rows(backend: Any, rows: Sequence[TransitionScore], transitions: Sequence[Transition], *,
               attempts: int = 3, temperature: float = 0.0,
               sleep: Callable[[float], None] | None = None) -> RubricResult:
    """One verdict per scored transition (module docstring for the failure rules)."""
    import time

    from envace.rewards.checklist import JudgeErrorKind
    from envace.rewards.llm_judge import JudgeSettings, RetriesExhausted, ask_until_parsed

    settings = JudgeSettings(attempts=attempts, temperature=temperature)
    counter = SimpleNamespace(calls=0, failed_attempts=Counter())
    by_id = {t.id: t for t in transitions}
    out = RubricResult()
    for row in rows:
        t = by_id[row.id]
        try:
            verdict = ask_until_parsed(backend, rubric_messages(t, row.predicted, row.predicted_text), VERDICT_SCHEMA,
                                       parse_rubric, settings, sleep or time.sleep, counter)
        except RetriesExhausted as exc:
            if exc.kind is JudgeErrorKind.BACKEND:
                raise RubricJudgeError(f"rubric judge unreachable or refusing on {t.id} after {exc.attempts} "
                                       f"attempts ({exc.kind.value}): {exc.error}; check judge.base_url / "
                                       "judge.model, or drop judge") from None
            out.failures.append((t.id, exc.kind.value, exc.error))
            continue
        out.scores.append((row, verdict))
    out.requests = counter.calls
    if rows and not out.scores:
        kinds = sorted({k for _, k, _ in out.failures})
        raise RubricJudgeError(f"rubric judge gave no usable verdict on any of {len(rows)} transitions ({kinds}; "
                               f"last: {out.failures[-1][2][:200]}); use a judge model that answers JSON")
    return out


def summarize_rubric(result: RubricResult, n_boot: int = 1000, seed: int = 0) -> dict[str, Any]:
    """{all: {dimension: summary}, source: {...}, n_failed: {kind: n}, requests}; dimensions in [0, 1]."""
    def group(items: list[tuple[TransitionScore, dict[str, int]]]) -> dict[str, Any]:
        return {d: interval_summary(np.array([(v[d] - 1) / 4 for _, v in items]), n_boot, seed) for d in DIMENSIONS}

    by_source: dict[str, list[tuple[TransitionScore, dict[str, int]]]] = {}
    for row, v in result.scores:
        by_source.setdefault(row.source, []).append((row, v))
    failed: dict[str, int] = {}
    for _, kind, _ in result.failures:
        failed[kind] = failed.get(kind, 0) + 1
    return {"all": group(result.scores), "source": {k: group(v) for k, v in sorted(by_source.items())},
            "n_failed": failed, "requests": result.requests}
