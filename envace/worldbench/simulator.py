"""The prompted simulator: any chat model, told by envace's own system prompt to be the tool.

A worldbench model row (`model_prompt=simulator`) that needs no Rehearse training: the model slot (an
OpenAI-compatible endpoint: base_url + model, or a local dir) gets SIMULATOR_SYSTEM_PROMPT and one user
message holding every tool schema offered, optional same-tool (arguments, response) examples from the train
split (as the Rehearse prompt's few-shot, envace.worldbench.predict.TrainIndex), the conversation so far
(the last `max_history_messages`, each cut at `max_message_chars`) and the call; it answers the tool's JSON
response and nothing else. The reply is read by `parse_simulated` (the JSON value: the whole reply, a
fenced block, an `<execution_result>` block, or the first complete JSON object / array in the text; a bare
scalar becomes `{"result": value}` as real responses do, envace.worldbench.records.target_value) and handed
to the scorer re-rendered as an `<execution_result>` block, so it is scored exactly as a Rehearse
prediction is. A reply with no JSON value in it is kept as it is and scored invalid.

Departures from the Rehearse prompt: a plain-JSON answer (no result tags), errors as `{"error": "..."}`
(envace's error predicate counts both forms), and the conversation as chat lines rather than the trained
section layout: the prompt addresses a general instruction-following model, not the policy.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from envace.execution_result import RESULT_CLOSE, RESULT_OPEN, render_execution_result
from envace.rollout.seeds import derive_seed
from envace.toolcall import strip_think
from envace.worldbench.config import ScoreConfig
from envace.worldbench.predict import PROMPT_TOO_LONG, Prediction, TrainIndex
from envace.worldbench.records import Transition

SIMULATOR_SYSTEM_PROMPT = """You play the back end of a software tool. An assistant is calling tools on behalf \
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


def simulator_messages(t: Transition, cfg: ScoreConfig, train: TrainIndex) -> list[dict[str, str]]:
    """The prompted simulator's chat for one transition (module docstring)."""
    keep = cfg.max_history_messages
    lines = []
    for m in (t.history[len(t.history) - keep:] if keep else []):
        text = m.get("content") or ""
        for c in m.get("tool_calls") or []:
            fn = c.get("function", c)
            text += f"\n[calls {fn.get('name')} with {fn.get('arguments')}]"
        who = m.get("role") if m.get("role") != "tool" else f"tool {m.get('name') or ''}".strip()
        lines.append(f"{who}: {_cut(text.strip(), cfg.max_message_chars)}")
    sections = [("Tool schemas", "\n".join(json.dumps(x.get("function", x), ensure_ascii=False, sort_keys=True)
                                           for x in t.tools) or "(none)")]
    if cfg.few_shot:
        shots = [json.dumps({"arguments": x.call["arguments"], "response": x.value}, ensure_ascii=False,
                            sort_keys=True) for x in train.examples(t, cfg.few_shot_per_tool)]
        if shots:
            sections.append((f"Earlier responses of {t.tool} (other sessions)", "\n".join(shots)))
    sections.append(("Conversation so far", "\n".join(lines) or "(nothing yet)"))
    sections.append(("Call to answer", json.dumps(t.call, ensure_ascii=False, sort_keys=True)))
    user = "\n\n".join(f"{head}:\n{body}" for head, body in sections) + "\n\nReturn the tool's JSON response."
    return [{"role": "system", "content": SIMULATOR_SYSTEM_PROMPT}, {"role": "user", "content": user}]


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


def parse_simulated(text: str) -> Any:
    """The JSON value a simulator reply holds (module docstring), or None when it holds none."""
    if not isinstance(text, str):
        return None
    ok, value = _json_in(strip_think(text))
    if not ok:
        return None
    if isinstance(value, (dict, list)) and value:
        return value
    return {"result": value}


def as_rehearse_text(reply: str) -> str:
    """The reply as the scorer reads predictions: its JSON value in an `<execution_result>` block, or the reply
    itself (scored invalid) when it holds no JSON value."""
    value = parse_simulated(reply)
    return reply if value is None else render_execution_result(value)


class PromptedSimulator:
    """A model slot behind SIMULATOR_SYSTEM_PROMPT: one chat request per transition."""

    def __init__(self, cfg: ScoreConfig, train: TrainIndex) -> None:
        from envace.engines.slots import SlotKind

        assert cfg.model is not None
        self.cfg, self.train, self.slot = cfg, train, cfg.model
        self.name = f"simulator:{self.slot.label()}"
        self.local = self.slot.kind is SlotKind.LOCAL
        self.backend = self.slot.build_chat_model("model") if self.local else self.slot.build_client("model")
        self.replies: list[str] = []  # the raw replies of the last predict(), before re-rendering

    def _ask(self, msgs: list[dict[str, str]], seed: int) -> tuple[str, str]:
        max_tokens = self.slot.max_tokens or self.cfg.max_new_tokens
        if not self.local:
            res = self.backend.chat(msgs, temperature=self.slot.temperature, top_p=self.slot.top_p,
                                    max_tokens=max_tokens, seed=seed)
            return res.text, ""
        from envace.engines.chat_model import ContextLengthExceeded

        try:
            choices, _ = self.backend.generate(msgs, temperature=self.slot.temperature, top_p=self.slot.top_p,
                                               max_tokens=max_tokens, seed=seed, parse_tools=False,
                                               max_model_len=self.slot.max_model_len)
        except ContextLengthExceeded:
            return "", PROMPT_TOO_LONG
        return choices[0].content, ""

    def predict(self, ts: Sequence[Transition]) -> list[Prediction]:
        out = []
        self.replies = []
        for t in ts:
            reply, note = self._ask(simulator_messages(t, self.cfg, self.train),
                                    derive_seed(self.cfg.seed, "worldbench", t.id) % (2**31))
            self.replies.append(reply)
            out.append(Prediction(as_rehearse_text(reply), note))
        return out
