"""The prompted simulator: any chat model, told by envace's own system prompt to be the tool.

A general instruction-following model (an OpenAI-compatible endpoint or a local dir) needs no Rehearse training
to answer tool calls: `prompted_messages` gives it SYSTEM_PROMPT and one user message holding every tool schema
offered, optional (arguments, response) examples of the called tool from other sessions, the conversation so
far (the last `max_history` messages, each cut at `max_chars`) and the call; it answers the tool's JSON
response and nothing else. `parse_simulated` reads the reply leniently (the JSON value: the whole reply, an
`<execution_result>` block, a fenced block, or the first complete JSON object / array in the text; a bare
scalar becomes `{"result": value}` as real responses are recorded) and `simulated_observation` turns it into
the rollout's Observation. Three seats use it: the worldbench row `model_prompt=simulator`
(envace.worldbench.simulator), the frozen simulator of the act-only arm (`rollout.simulator_prompt=prompted`,
envace.rollout.simulator_seat) and the test-time private phase (`tts.engine=simulator`).

Departures from the Rehearse prompt (envace.roles.prompts): a plain-JSON answer (no result tags), errors as
`{"error": "..."}` (envace's error predicate counts both forms), and the conversation as chat lines rather
than the trained section layout: the prompt addresses a general model, not the policy.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from envace.execution_result import RESULT_CLOSE, RESULT_OPEN, is_error_value
from envace.toolcall import strip_think
from envace.types import ErrorCode, Observation, Role
from envace.untrusted import clean_text, short, too_long

MAX_HISTORY_MESSAGES = 12  # the prompt's defaults (the worldbench row sets its own in ScoreConfig)
MAX_MESSAGE_CHARS = 600
NO_JSON = "the simulator's reply holds no JSON value"

SYSTEM_PROMPT = """You play the back end of a software tool. An assistant is calling tools on behalf \
of a user; for the one call you are given, you return exactly what the tool itself would return.

Rules:
- Use the tool schemas to know what the tool does and which arguments it accepts.
- Treat the conversation as the record of what has happened: identifiers, balances, bookings and other \
facts that earlier tool responses established still hold unless a later call changed them. Invent new \
values only where nothing fixes them, and keep them realistic.
- If the call cannot succeed (an unknown tool, a missing or ill-typed argument, an identifier that does \
not exist, a value outside what the tool allows), return the error the tool would give, as \
{"error": "<short reason>"}.
- Answer with the response as a single JSON value (an object or an array) and nothing else: no prose, no \
code fences, no explanation."""

_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.DOTALL)


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _line(m: Mapping[str, Any], limit: int) -> str:
    text = m.get("content") or ""
    for c in m.get("tool_calls") or []:
        fn = c.get("function", c)
        args = fn.get("arguments")
        text += f"\n[calls {fn.get('name')} with {args if isinstance(args, str) else json.dumps(args, sort_keys=True)}]"
    who = m.get("role") if m.get("role") != "tool" else f"tool {m.get('name') or ''}".strip()
    return f"{who}: {_cut(str(text).strip(), limit)}"


def prompted_messages(tools: Sequence[Mapping[str, Any]], history: Sequence[Mapping[str, Any]],
                      call: Mapping[str, Any], examples: Sequence[tuple[Mapping[str, Any], Any]] = (), *,
                      max_history: int = MAX_HISTORY_MESSAGES,
                      max_chars: int = MAX_MESSAGE_CHARS) -> list[dict[str, str]]:
    """The prompted simulator's chat for one call (module docstring). `history`: OpenAI-shape messages (a
    system message is shown as a `system:` line); `call`: {"name", "arguments"}; `examples`: (arguments,
    response) pairs of the same tool from other sessions (none: the section is left out)."""
    kept = history[len(history) - max_history:] if max_history else []
    lines = [_line(m, max_chars) for m in kept]
    schemas = "\n".join(json.dumps(x.get("function", x), ensure_ascii=False, sort_keys=True) for x in tools)
    sections = [("Tool schemas", schemas or "(none)")]
    if examples:
        shots = [json.dumps({"arguments": a, "response": r}, ensure_ascii=False, sort_keys=True) for a, r in examples]
        sections.append((f"Earlier responses of {call.get('name')} (other sessions)", "\n".join(shots)))
    sections.append(("Conversation so far", "\n".join(lines) or "(nothing yet)"))
    sections.append(("Call to answer", json.dumps(dict(call), ensure_ascii=False, sort_keys=True)))
    user = "\n\n".join(f"{head}:\n{body}" for head, body in sections) + "\n\nReturn the tool's JSON response."
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user}]


def _json_in(text: str) -> tuple[bool, Any]:
    body = text.strip()
    candidates = [body]
    if RESULT_OPEN in body and RESULT_CLOSE in body:
        candidates.append(body.split(RESULT_OPEN, 1)[1].split(RESULT_CLOSE, 1)[0])
    candidates += [m.group(1) for m in _FENCE.finditer(body)]
    for c in candidates:
        try:
            return True, json.loads(c.strip())
        except (json.JSONDecodeError, RecursionError, ValueError):
            pass
    decoder = json.JSONDecoder()
    for i, ch in enumerate(body):
        if ch in "{[":
            try:
                return True, decoder.raw_decode(body, i)[0]
            except (json.JSONDecodeError, RecursionError, ValueError):
                continue
    return False, None


def parse_simulated(text: Any) -> Any:
    """The JSON value a simulator reply holds (module docstring), or None when it holds none. Never raises."""
    if not isinstance(text, str):
        return None
    ok, value = _json_in(strip_think(text))
    if not ok:
        return None
    if isinstance(value, (dict, list)) and value:
        return value
    return {"result": value}


def simulated_observation(text: Any) -> Observation:
    """The rollout's Observation of one prompted-simulator reply: its JSON value (an `{"error": ...}` or
    `error_tool_call` value is kept as the content and flagged REHEARSED_ERROR, so the episode rules see it
    as any rehearsed error), or, with no JSON value in it, a parse failure (NO_EXECUTION_RESULT_TAG, the
    Rehearse parser's code for "no result written"). Never raises; `source` is Role.REHEARSE."""
    if isinstance(text, str) and (over := too_long(text)) is not None:
        return Observation(content=None, source=Role.REHEARSE, error=ErrorCode.OUTPUT_TOO_LONG, detail=over)
    value = parse_simulated(clean_text(text) if isinstance(text, str) else text)
    if value is None:
        return Observation(content=None, source=Role.REHEARSE, error=ErrorCode.NO_EXECUTION_RESULT_TAG, detail=NO_JSON)
    if is_error_value(value):
        return Observation(content=value, source=Role.REHEARSE, error=ErrorCode.REHEARSED_ERROR,
                           detail=short(f"simulated error: {json.dumps(value, sort_keys=True)}", 200))
    return Observation(content=value, source=Role.REHEARSE)
