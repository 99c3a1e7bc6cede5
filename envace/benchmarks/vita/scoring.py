"""VitaBench's sliding-window rubric judge ("trajectory" evaluation), over any judge backend.

As VitaBench's `TrajectoryEvaluator.calculate_reward`:
- rubric states start unmet ("Not evaluated yet"), keyed `rubric_<i>` in rubric order;
- the conversation is cut into windows of `window_size` (10) messages overlapping by `overlap` (2):
  one window when it is that short; else windows start at 0, step, 2*step, ... (step = size - overlap)
  and the last one is the first that reaches the end;
- each window is one judge call: a system prompt with the environment info (current time), the user
  instruction and the window's position, and a user message holding the window (lines
  `[<1-based global index>] <role>: <content + tool calls as name(k=v, ...)>`; empty messages skipped) and
  the current rubric states as JSON; the reply is a JSON list `[{rubric_idx, justification,
  meetExpectation}]` that updates the states, which carry over to the next window; an unparseable
  reply keeps the states;
- reward 1 only if every rubric is met (and there is at least one); the fraction met is kept; a task
  without criteria or rubrics scores 1.

The system prompt is VitaBench's own `sliding_window_eval_template` read from the checkout when
available; otherwise a paraphrase (a departure the benchmark records). Backends: anything with
`complete(messages, *, json_schema=None, temperature=0.0) -> str` (OpenAIChatClient, the checklist
judge's backends), or a BenchPolicy through `PolicyJudge`. The official judge is claude-3.7-sonnet; no
remote judge exists offline, so tests use a deterministic local judge class.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

from envace.benchmarks.vita.data import VitaTask
from envace.engines.chat_model import extract_json
from envace.engines.reply import BenchPolicy

FALLBACK_TEMPLATE = """You judge a conversation between a user and a service agent, one window of it at a time \
(window {window_idx} of {total_windows}). Environment: {env_info}. The user's goal: {user_instruction}
For every rubric in <current_rubrics>, decide from this window and the current state whether the agent's \
behaviour meets it; a rubric met in an earlier window stays met unless this window contradicts it.
Answer only with a JSON list: [{{"rubric_idx": "rubric_0", "justification": "...", "meetExpectation": true}}, ...]"""
_WEEKDAYS_ZH = ("星期一", "星期二", "星期三", "星期四", "星期五", "星期六", "星期日")


@runtime_checkable
class JudgeBackend(Protocol):
    def complete(self, messages: list[dict[str, Any]], *, json_schema: dict[str, Any] | None = None,
                 temperature: float = 0.0) -> str: ...


class PolicyJudge:
    """A BenchPolicy used as a judge backend (its reply text)."""

    def __init__(self, policy: BenchPolicy) -> None:
        self.policy, self.name = policy, getattr(policy, "name", type(policy).__name__)

    def complete(self, messages: list[dict[str, Any]], *, json_schema: dict[str, Any] | None = None,
                 temperature: float = 0.0) -> str:
        return self.policy.reply(messages, [], context={"benchmark": "vita", "role": "judge"}).content


def as_backend(judge: Any) -> JudgeBackend:
    if isinstance(judge, JudgeBackend):
        return judge
    if hasattr(judge, "reply"):
        return PolicyJudge(judge)
    raise TypeError(f"{type(judge).__name__} is not a judge: pass an object with complete(messages) -> str "
                    f"(e.g. OpenAIChatClient) or a BenchPolicy")


def sliding_windows(n: int, size: int = 10, overlap: int = 2) -> list[tuple[int, int]]:
    """[start, end) of each window over n messages."""
    if size < 1 or not 0 <= overlap < size:
        raise ValueError(f"window size {size} must be >= 1 and overlap {overlap} within [0, size)")
    if n <= size:
        return [(0, n)]
    out, start, step = [], 0, size - overlap
    while start < n:
        out.append((start, min(start + size, n)))
        if start + size >= n:
            break
        start += step
    return out


def weekday(time: str, language: str) -> str:
    try:
        day = datetime.strptime(time.strip()[:10], "%Y-%m-%d").weekday()
    except ValueError:
        return ""
    return _WEEKDAYS_ZH[day] if language == "chinese" else datetime(2024, 1, 1 + day).strftime("%A")


def _call_text(call: Mapping[str, Any]) -> str:
    fn = call.get("function", call)
    args = fn.get("arguments", {})
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except json.JSONDecodeError:
            return f"{fn.get('name')}({args})"
    if isinstance(args, dict):
        return f"{fn.get('name')}(" + ", ".join(f"{k}={v!r}" for k, v in args.items()) + ")"
    return f"{fn.get('name')}({args})"


def format_window(messages: list[Mapping[str, Any]], start: int) -> str:
    lines = []
    for i, m in enumerate(messages):
        text = str(m.get("content") or "")
        calls = ".".join(_call_text(c) for c in m.get("tool_calls") or []) if m.get("role") == "assistant" else ""
        text = f"{text} {calls}" if text and calls else text or calls
        if text:
            lines.append(f"[{start + i + 1}] {m.get('role', 'unknown')}: {text}")
    return "\n".join(lines)


def parse_verdicts(text: str) -> list[dict[str, Any]] | None:
    """The judge's list of rubric verdicts, or None when the reply holds none."""
    found = extract_json(text or "")
    if found is None:
        return None
    try:
        data = json.loads(found)
    except json.JSONDecodeError:
        return None
    if isinstance(data, dict):
        data = next((v for v in data.values() if isinstance(v, list)), [data])
    return [d for d in data if isinstance(d, dict)] if isinstance(data, list) else None


def _met(value: Any, old: bool) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    return old


@dataclass
class JudgeResult:
    reward: float
    met: list[bool]
    fraction: float
    windows: list[tuple[int, int]] = field(default_factory=list)
    states: dict[str, dict[str, Any]] = field(default_factory=dict)
    unparsed_windows: int = 0
    transcript: list[dict[str, Any]] = field(default_factory=list)  # per window: the judge's prompt and reply


class RubricJudge:
    def __init__(self, backend: Any, *, window_size: int = 10, overlap: int = 2, template: str | None = None,
                 language: str = "english") -> None:
        self.backend = as_backend(backend)
        self.window_size, self.overlap, self.language = window_size, overlap, language
        self.template = template or FALLBACK_TEMPLATE
        self.official_template = template is not None
        self.name = getattr(backend, "name", None) or getattr(backend, "model", None) or type(backend).__name__

    def judge(self, task: VitaTask, messages: list[Mapping[str, Any]]) -> JudgeResult:
        if not task.has_criteria or not task.rubrics:
            return JudgeResult(1.0, [], 1.0)
        states = {f"rubric_{i}": {"rubric": r, "justification": "Not evaluated yet", "meetExpectation": False}
                  for i, r in enumerate(task.rubrics)}
        env_info = {"system_time": f"{task.time} {weekday(task.time, self.language)}".strip(), "database": []}
        windows = sliding_windows(len(messages), self.window_size, self.overlap)
        unparsed = 0
        transcript: list[dict[str, Any]] = []
        for w, (start, end) in enumerate(windows):
            system = self.template.format(env_info=env_info, user_instruction=task.instructions,
                                          window_idx=w + 1, total_windows=len(windows))
            rubrics = json.dumps([{"rubric_idx": k, **v} for k, v in states.items()], ensure_ascii=False, indent=2)
            user = (f"# Input\n<window_content>\n{format_window(list(messages[start:end]), start)}\n</window_content>"
                    f"\n\n<current_rubrics>\n{rubrics}\n</current_rubrics>")
            prompt = [{"role": "system", "content": system}, {"role": "user", "content": user}]
            text = self.backend.complete(prompt)
            transcript.append({"window": w + 1, "messages": prompt + [{"role": "assistant", "content": text}]})
            verdicts = parse_verdicts(text)
            if verdicts is None:
                unparsed += 1
                continue
            for v in verdicts:
                key = v.get("rubric_idx")
                if key in states:
                    states[key]["justification"] = str(v.get("justification", "No justification provided"))
                    states[key]["meetExpectation"] = _met(v.get("meetExpectation"), states[key]["meetExpectation"])
        met = [bool(s["meetExpectation"]) for s in states.values()]
        return JudgeResult(1.0 if all(met) else 0.0, met, sum(met) / len(met), windows, states, unparsed,
                           transcript)
