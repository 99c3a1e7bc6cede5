"""Predicting a transition's response: the Rehearse prompt for a model slot, and two reference rows.

Model slots (envace.engines.slots.ModelSlot): the Rehearse chat (envace.roles.rehearse.rehearse_messages,
the rollout's own prompt) of the configured style, with the transition's tools, the conversation before
the call (the last `max_history_messages` messages, each cut at `max_message_chars`) and, with the
few-shot switch on, up to `few_shot_per_tool` (name, arguments, response) examples of the SAME tool from
the source's train split (a gold example first, then an error one, alternating, so errors are shown
too). Test transitions never supply few-shot. A local slot generates in batches on its engine; when a
prompt does not fit the model's context, the oldest history is dropped, then the few-shot; a prompt
that still does not fit is predicted as "" with the note `prompt_too_long` (scored invalid, counted in
the report). An endpoint slot gets one chat request per transition; a transport error raises.

Reference rows (no model):
- `copy_last`: the real response of the most recent earlier gold call of the same tool in the same task;
  without one, the first train response of that tool; without one, nothing (invalid);
- `typed_empty`: the empty value of the tool's result type: from its declared result schema (BFCL's
  `response`), else from the shape of the first train response of the tool (strings "", numbers 0,
  booleans false, lists [], objects keep their keys); else `{"result": ""}`.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from envace.execution_result import render_execution_result
from envace.roles.rehearse import FEW_SHOT_META, rehearse_messages, rehearse_prompt_ids
from envace.rollout.seeds import derive_seed
from envace.toolcall import render_tool_call
from envace.types import Message, Task, ToolCall
from envace.worldbench.config import ScoreConfig
from envace.worldbench.records import CallKind, Transition

PROMPT_TOO_LONG = "prompt_too_long"


@dataclass
class Prediction:
    text: str
    note: str = ""


class TrainIndex:
    """Train-split lookups: per (source, tool) train transitions, in file order."""

    def __init__(self, train: Sequence[Transition]) -> None:
        self.by_tool: dict[tuple[str, str], list[Transition]] = {}
        for t in train:
            self.by_tool.setdefault((t.source.value, t.tool), []).append(t)

    def examples(self, t: Transition, k: int) -> list[Transition]:
        pool = self.by_tool.get((t.source.value, t.tool), [])
        gold = [x for x in pool if x.kind is CallKind.GOLD]
        errors = [x for x in pool if x.kind is not CallKind.GOLD and x.is_error]
        out: list[Transition] = []
        for i in range(k):
            for src in (gold, errors):
                if len(out) < k and i < len(src):
                    out.append(src[i])
        return out

    def first_gold(self, t: Transition) -> Transition | None:
        return next((x for x in self.by_tool.get((t.source.value, t.tool), []) if x.kind is CallKind.GOLD), None)


# ----- reference rows --------------------------------------------------------------------------------

def empty_of_schema(schema: Any) -> Any:
    if not isinstance(schema, dict):
        return ""
    typ = schema.get("type")
    if typ == "object" or isinstance(schema.get("properties"), dict):
        return {k: empty_of_schema(v) for k, v in (schema.get("properties") or {}).items()}
    return {"array": [], "string": "", "integer": 0, "number": 0, "boolean": False, "null": None}.get(typ, "")


def emptied(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: emptied(v) for k, v in value.items()}
    if isinstance(value, list):
        return []
    if isinstance(value, bool):
        return False
    if isinstance(value, (int, float)):
        return 0
    if isinstance(value, str):
        return ""
    return None


class CopyLast:
    name = "copy_last"

    def __init__(self, test: Sequence[Transition], train: TrainIndex) -> None:
        self.train = train
        self.gold: dict[tuple[str, str, str], list[Transition]] = {}
        for t in test:
            if t.kind is CallKind.GOLD:
                self.gold.setdefault((t.source.value, t.domain, t.task_id), []).append(t)

    def value(self, t: Transition) -> Any:
        earlier = [x for x in self.gold.get((t.source.value, t.domain, t.task_id), [])
                   if x.position < t.position and x.tool == t.tool]
        if earlier:
            return max(earlier, key=lambda x: x.position).value
        first = self.train.first_gold(t)
        return None if first is None else first.value

    def predict(self, ts: Sequence[Transition]) -> list[Prediction]:
        return [Prediction("" if (v := self.value(t)) is None else render_execution_result(v)) for t in ts]


class TypedEmpty:
    name = "typed_empty"

    def __init__(self, train: TrainIndex) -> None:
        self.train = train

    def value(self, t: Transition) -> Any:
        if t.result_schema:
            return empty_of_schema(t.result_schema)
        first = self.train.first_gold(t)
        return {"result": ""} if first is None else emptied(first.value)

    def predict(self, ts: Sequence[Transition]) -> list[Prediction]:
        return [Prediction(render_execution_result(self.value(t))) for t in ts]


# ----- model slots -------------------------------------------------------------------------------------

def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def prompt_messages(t: Transition, cfg: ScoreConfig, train: TrainIndex, n_history: int | None = None,
                    few_shot: bool | None = None) -> list[dict[str, Any]]:
    """The Rehearse chat for one transition (see the module docstring)."""
    keep = cfg.max_history_messages if n_history is None else n_history
    use_shots = cfg.few_shot if few_shot is None else few_shot
    hist = t.history[len(t.history) - keep:] if keep else []
    history = [Message.from_openai({**m, "content": _cut(str(m.get("content") or ""), cfg.max_message_chars)})
               for m in hist]
    shots = [[x.tool, x.call["arguments"], x.value] for x in train.examples(t, cfg.few_shot_per_tool)] \
        if use_shots else []
    task = Task(uuid=t.task_id, tools=t.tools, messages=[], domain=t.domain, meta={FEW_SHOT_META: shots})
    call = ToolCall(t.tool, dict(t.call["arguments"]))
    return rehearse_messages(task, history, render_tool_call(call), call, few_shot=use_shots, style=cfg.style)


def fit_rehearse_ids(t: Transition, cfg: ScoreConfig, train: TrainIndex, tokenizer: Any, limit: int | None, *,
                     enable_thinking: bool) -> list[int] | None:
    """The Rehearse prompt's ids within `limit` tokens: the oldest history dropped (halving the kept
    messages), then the few-shot; None when not even that fits."""
    n = cfg.max_history_messages
    shots = cfg.few_shot
    while True:
        ids = rehearse_prompt_ids(tokenizer, prompt_messages(t, cfg, train, n, shots), enable_thinking=enable_thinking)
        if limit is None or len(ids) <= limit:
            return ids
        if n > 0:
            n = n // 2 if n > 1 else 0
        elif shots:
            shots = False
        else:
            return None


class LocalRehearser:
    """A local slot's engine, fed Rehearse prompts in batches (greedy unless the slot samples)."""

    def __init__(self, cfg: ScoreConfig, train: TrainIndex) -> None:
        from envace.engines.base import GenRequest

        self.cfg, self.train, self.GenRequest = cfg, train, GenRequest
        assert cfg.model is not None
        self.slot = cfg.model
        self.chat = self.slot.build_chat_model("model")
        self.name = self.slot.label()
        engine = self.chat.engine
        ctx = getattr(getattr(getattr(engine, "model", None), "config", None), "max_position_embeddings", None)
        self.limit = cfg.max_prompt_tokens or (int(ctx) - cfg.max_new_tokens if ctx else None)

    def _ids(self, t: Transition) -> list[int] | None:
        return fit_rehearse_ids(t, self.cfg, self.train, self.chat.tokenizer, self.limit, enable_thinking=False)

    def predict(self, ts: Sequence[Transition]) -> list[Prediction]:
        out: list[Prediction | None] = [None] * len(ts)
        todo: list[tuple[int, list[int]]] = []
        for i, t in enumerate(ts):
            ids = self._ids(t)
            if ids is None:
                out[i] = Prediction("", PROMPT_TOO_LONG)
            else:
                todo.append((i, ids))
        bs = self.cfg.batch_size
        for start in range(0, len(todo), bs):
            chunk = todo[start:start + bs]
            reqs = [self.GenRequest(prompt_ids=ids, temperature=self.slot.temperature, top_p=self.slot.top_p,
                                    max_new_tokens=self.slot.max_tokens or self.cfg.max_new_tokens,
                                    seed=derive_seed(self.cfg.seed, "worldbench", ts[i].id) % (2**31))
                    for i, ids in chunk]
            results = self.chat.engine.generate(reqs)
            for (i, _), r in zip(chunk, results):
                out[i] = Prediction(r.text)
        return [p if p is not None else Prediction("", "missing") for p in out]


class EndpointRehearser:
    def __init__(self, cfg: ScoreConfig, train: TrainIndex) -> None:
        assert cfg.model is not None
        self.cfg, self.train, self.slot = cfg, train, cfg.model
        self.client = self.slot.build_client("model")
        self.name = self.slot.label()

    def predict(self, ts: Sequence[Transition]) -> list[Prediction]:
        out = []
        for t in ts:
            res = self.client.chat(prompt_messages(t, self.cfg, self.train), temperature=self.slot.temperature,
                                   top_p=self.slot.top_p, max_tokens=self.slot.max_tokens or self.cfg.max_new_tokens,
                                   seed=derive_seed(self.cfg.seed, "worldbench", t.id) % (2**31))
            out.append(Prediction(res.text))
        return out


def model_predictor(cfg: ScoreConfig, train: TrainIndex) -> Any:
    from envace.engines.slots import SlotKind

    assert cfg.model is not None
    return LocalRehearser(cfg, train) if cfg.model.kind is SlotKind.LOCAL else EndpointRehearser(cfg, train)


def timed_predict(predictor: Any, ts: Sequence[Transition]) -> tuple[list[Prediction], float]:
    start = time.perf_counter()
    preds = predictor.predict(ts)
    return preds, time.perf_counter() - start
