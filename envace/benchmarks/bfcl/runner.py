"""Run BFCL entries against a `BenchPolicy` with BFCL's own inference loop.

`PolicyHandler` is BFCL's OpenAI-compatible FC handler (`OpenAICompletionsHandler`) with the HTTP call
replaced by `policy.reply(messages, tools)`. Everything else is BFCL's code, unchanged: tool compilation
(`convert_to_tool` with GORILLA_TO_OPENAPI), the first/next-turn message handling, the multi-turn loop
(`BaseHandler.inference_multi_turn_FC`: execution of each decoded call against BFCL's backend classes,
tool results appended as `tool` messages, at most MAXIMUM_STEP_LIMIT = 20 steps per turn before a force
quit, miss_func docs injected at their turn with BFCL's "I have updated some more functions..." message),
and the FC decoders (`decode_ast` / `decode_execute`). Exceptions during inference are recorded as the
result string "Error during inference: ..." as BFCL's generation script does, plus a typed `TaskError`
whose stage is `policy` when the model call raised and `environment` otherwise (BFCL's loop and backends).
The handler keeps the conversation of its last query (`messages()`, OpenAI chat dicts) for the record.

Safety departure: BFCL executes a multi-turn call by `eval` of `name(key=repr(value), ...)` built from the
model's output, so a model-chosen name like `open` or an argument name like `a=...,b` would run arbitrary
Python. `decode_execute` here refuses (as undecodable, which BFCL treats as "no call; the turn ends")
calls whose name or argument names are not Python identifiers, and calls to Python builtins that are not
tools of the entry. Unknown non-builtin names still reach BFCL and fail with its own NameError message.

Multi-turn backends live in `multi_turn_utils` module globals keyed by model name + entry id; every
(run, sample) gets its own model name, and `release_instances` drops an entry's instances once scored, so
k samples never share state and memory does not grow over a run.
"""

from __future__ import annotations

import builtins
import json
import keyword
import re
import time
import traceback
from copy import deepcopy
from functools import lru_cache
from typing import Any

from envace.benchmarks.bfcl.compat import load_bfcl
from envace.benchmarks.bfcl.data import BFCLEntry
from envace.benchmarks.errors import StageTracker, TaskStage
from envace.engines.reply import AssistantReply, BenchPolicy
from envace.rollout.seeds import derive_seed


def position(messages: list[dict[str, Any]]) -> tuple[int, int]:
    """(turn, step) of the next query: user turns so far - 1, assistant messages since the last user turn."""
    turn, step = -1, 0
    for m in messages:
        if m.get("role") == "user":
            turn, step = turn + 1, 0
        elif m.get("role") == "assistant":
            step += 1
    return max(turn, 0), step


def unsafe_call(calls: Any, tool_names: set[str]) -> str | None:
    """Why BFCL must not eval these decoded FC calls ([{name: arguments-json}, ...]), or None."""
    for item in calls if isinstance(calls, list) else []:
        for name, args in (item.items() if isinstance(item, dict) else []):
            if not name.isidentifier() or keyword.iskeyword(name):
                return f"function name {name!r} is not a Python identifier"
            if name not in tool_names and hasattr(builtins, name):
                return f"{name!r} is a Python builtin, not a tool of this entry"
            parsed = json.loads(args) if isinstance(args, str) else args
            bad = [k for k in (parsed if isinstance(parsed, dict) else {}) if not str(k).isidentifier()]
            if bad:
                return f"argument names {bad} of {name!r} are not Python identifiers"
    return None


def tool_names(entry: BFCLEntry | None) -> set[str]:
    """Every function the entry can offer, held-back miss_func docs included."""
    if entry is None:
        return set()
    docs = list(entry.prompt.get("function", []))
    for held in (entry.prompt.get("missed_function") or {}).values():
        docs += [d for d in held if isinstance(d, dict)]
    return {d["name"] for d in docs}


@lru_cache(maxsize=1)
def policy_handler_class() -> type:
    b = load_bfcl()
    base = b.openai_handler.OpenAICompletionsHandler

    class PolicyHandler(base):  # type: ignore[misc, valid-type]
        """BFCL's OpenAI FC handler whose model call is `policy.reply`."""

        def __init__(self, policy: BenchPolicy, tag: str, seed: int, sample: int) -> None:
            # BaseHandler.__init__ only (the OpenAI handler's would build an openai.OpenAI client).
            b.base_handler.BaseHandler.__init__(self, model_name=tag, temperature=0.0,
                                                registry_name=f"{tag}-FC", is_fc_model=True)
            self.model_style = b.enums.ModelStyle.OPENAI_COMPLETIONS
            self.policy, self.seed, self.sample = policy, seed, sample
            self.entry: BFCLEntry | None = None
            self.replies: list[AssistantReply] = []
            self.tracker = StageTracker(TaskStage.ENVIRONMENT)
            self.last_query: list[dict[str, Any]] = []

        def messages(self) -> list[dict[str, Any]]:
            """The conversation as the model saw it at its last query, plus its last reply."""
            tail = [self.replies[-1].to_message()] if self.replies else []
            return [dict(m) for m in self.last_query] + tail

        def _query_FC(self, inference_data: dict) -> tuple[AssistantReply, float]:
            messages = list(inference_data["message"])
            turn, step = position(messages)
            entry = self.entry
            ctx = {"benchmark": "bfcl", "entry_id": entry.id if entry else None,
                   "category": entry.category if entry else None, "sample": self.sample, "turn": turn, "step": step}
            seed = derive_seed(self.seed, ctx["entry_id"], self.sample, turn, step)
            start = time.perf_counter()
            self.last_query = messages
            self.tracker.stage = TaskStage.POLICY  # left at `policy` if the call raises
            reply = self.policy.reply(messages, inference_data["tools"], seed=seed, context=ctx)
            self.tracker.stage = TaskStage.ENVIRONMENT
            self.replies.append(reply)
            return reply, time.perf_counter() - start

        def decode_execute(self, result: Any, has_tool_call_tag: bool) -> list[str]:
            reason = unsafe_call(result, tool_names(self.entry))
            if reason is not None:
                raise ValueError(f"refused to execute: {reason}")
            return super().decode_execute(result, has_tool_call_tag)

        def _parse_query_response_FC(self, reply: AssistantReply) -> dict:
            history = reply.to_message()
            if reply.tool_calls:
                responses: Any = [{c.name: json.dumps(c.arguments, ensure_ascii=False)} for c in reply.tool_calls]
                ids = [c["id"] for c in history["tool_calls"]]
            else:
                responses, ids = reply.content, []
            return {"model_responses": responses, "model_responses_message_for_chat_history": history,
                    "tool_call_ids": ids, "input_token": int(reply.usage.get("prompt_tokens", 0) or 0),
                    "output_token": int(reply.usage.get("completion_tokens", 0) or 0)}

    return PolicyHandler


def make_handler(policy: BenchPolicy, tag: str, seed: int = 0, sample: int = 0) -> Any:
    """A handler for one (run, sample); `tag` must be unique per (run, sample) and use [A-Za-z0-9_]."""
    if not re.fullmatch(r"[A-Za-z0-9_]+", tag):
        raise ValueError(f"handler tag {tag!r} must match [A-Za-z0-9_]+ (it names module globals)")
    return policy_handler_class()(policy, tag, seed, sample)


def infer(handler: Any, entry: BFCLEntry) -> dict[str, Any]:
    """Run one entry through BFCL's inference loop; returns BFCL's result record (`id`, `result`, metadata)."""
    test_case = deepcopy(entry.prompt)  # the loop mutates function docs (miss_func) and questions
    handler.entry, handler.replies, handler.last_query = entry, [], []
    handler.tracker.stage = TaskStage.ENVIRONMENT
    try:
        result, metadata = handler.inference(test_case, include_input_log=False, exclude_state_log=True)
    except Exception as exc:  # as BFCL's multi_threaded_inference: record and go on
        result, metadata = f"Error during inference: {exc}", {"traceback": traceback.format_exc(limit=10),
                                                              "task_error": handler.tracker.error(exc)}
    return {"id": entry.id, "result": result, **metadata}


def release_instances(handler: Any, entry_id: str) -> int:
    """Drop the backend instances BFCL cached for this (handler, entry) during inference and evaluation."""
    g = vars(load_bfcl().multi_turn_utils)
    prefix = handler.model_name_underline_replaced + "_"
    needle = "_" + re.sub(r"[-./:]", "_", entry_id) + "_"
    stale = [k for k in list(g) if k.startswith(prefix) and needle in k and k.endswith("_instance")]
    for k in stale:
        g.pop(k, None)
    return len(stale)
