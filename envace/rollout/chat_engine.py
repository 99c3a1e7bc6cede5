"""Chat-level engines behind the `GenerationEngine` protocol, so chat-level callers (benchmarks, OpenAI-compatible
endpoints) run episodes through the ONE rollout state machine (envace.rollout.machine): `ChatPolicyEngine`
(a `BenchPolicy` in the Act seat) and `ChatTextEngine` (an endpoint's raw text, e.g. a frozen simulator in
the Rehearse seat).

The machine sends the conversation in `GenRequest.messages` / `GenRequest.tools`; this adapter normalises
it for an OpenAI endpoint, asks the policy and returns the reply as Act text (content + Hermes
`<tool_call>` blocks) for the machine's own parser; a reply the policy classified as malformed keeps its
error. The request's temperature / max_tokens go to a copy of the policy when it has those attributes,
else `notes` says they were not applied. No token ids or log-probs exist at this level. Departure: without
the policy's tokenizer (an HTTP endpoint), the context limit is estimated as characters / `chars_per_token`.

`ChatTextEngine` sends each request's messages to an OpenAI-compatible client (`chat(messages, ...)`) with
the request's temperature, top_p, max_new_tokens and seed, and cuts the reply after the first stop string,
keeping it (the `GenRequest` contract; OpenAI servers drop the stop string, so stops are applied here, not
sent). The reply is untrusted text for the caller's strict parser. A client error propagates: a failed
endpoint stops the run, it never becomes an observation.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from typing import Any

from envace.engines.base import GenRequest, GenResult
from envace.engines.reply import AssistantReply, BenchPolicy
from envace.toolcall import render_tool_call


def act_text(reply: AssistantReply) -> str:
    """The reply as the Act role's text: visible content, then one Hermes block per call."""
    parts = [reply.content] if reply.content else []
    return "\n".join(parts + [render_tool_call(c) for c in reply.tool_calls])


def openai_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Messages as an OpenAI endpoint wants them: every call with an id and JSON-string arguments, every
    tool result with the `tool_call_id` of the call it answers (calls answered in order)."""
    out: list[dict[str, Any]] = []
    pending: list[str] = []
    n = 0
    for m in messages:
        msg = dict(m)
        if msg.get("tool_calls"):
            calls = []
            for c in msg["tool_calls"]:
                fn = dict(c.get("function", c))
                args = fn.get("arguments", {})
                cid = c.get("id") or f"call_{n}"
                n += 1
                calls.append({"id": cid, "type": "function",
                              "function": {"name": fn.get("name"), "arguments":
                                           args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)}})
                pending.append(cid)
            msg["tool_calls"] = calls
        elif msg.get("role") == "tool" and not msg.get("tool_call_id"):
            msg["tool_call_id"] = pending.pop(0) if pending else f"call_{n}"
        if msg.get("role") == "tool" and msg.get("tool_call_id") in pending:
            pending.remove(msg["tool_call_id"])
        out.append(msg)
    return out


def estimated_tokens(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
                     chars_per_token: float) -> int:
    """A prompt's length in tokens without a tokenizer: its JSON characters / `chars_per_token`, rounded up."""
    chars = len(json.dumps(messages, ensure_ascii=False)) + len(json.dumps(tools or [], ensure_ascii=False))
    return int(chars / chars_per_token) + 1


class ChatPolicyEngine:
    """`GenerationEngine` over a `BenchPolicy` (see module doc). `context` is passed to every reply."""

    chat = True
    tokenizer = None

    def __init__(self, policy: BenchPolicy, *, context: Mapping[str, Any] | None = None,
                 chars_per_token: float = 4.0) -> None:
        self.policy = policy
        self.context = dict(context or {})
        self.chars_per_token = chars_per_token
        self.notes: list[str] = []
        self._copies: dict[tuple[float, int], BenchPolicy] = {}

    def count_tokens(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> int:
        model = getattr(self.policy, "model", None)
        if model is not None and hasattr(model, "render"):
            try:
                return len(model.render(openai_messages(messages), tools)[1])
            except Exception:  # a template that cannot render this: fall back to the estimate
                pass
        return estimated_tokens(messages, tools, self.chars_per_token)

    def _policy_for(self, temperature: float, max_tokens: int) -> BenchPolicy:
        key = (temperature, max_tokens)
        if key not in self._copies:
            have = {k: v for k, v in (("temperature", temperature), ("max_tokens", max_tokens))
                    if hasattr(self.policy, k)}
            for k in ("temperature", "max_tokens"):
                note = f"{type(self.policy).__name__} has no {k!r}; used as is"
                if k not in have and note not in self.notes:
                    self.notes.append(note)
            pol = self.policy
            if have:
                pol = copy.copy(self.policy)
                for k, v in have.items():
                    setattr(pol, k, v)
            self._copies[key] = pol
        return self._copies[key]

    def generate(self, requests: list[GenRequest]) -> list[GenResult]:
        out = []
        for req in requests:
            if req.messages is None:
                raise ValueError("ChatPolicyEngine needs GenRequest.messages (a chat-level request); the rollout "
                                 "sends them to engines with chat = True")
            pol = self._policy_for(req.temperature, req.max_new_tokens)
            reply = pol.reply(openai_messages(req.messages), list(req.tools or []), seed=req.seed,
                              context=self.context)
            meta: dict[str, Any] = {"finish_reason": reply.finish_reason}
            if reply.parse_error is not None:
                meta["parse_error"], meta["detail"] = reply.parse_error, reply.detail
            out.append(GenResult(token_ids=[], logprobs=[], text=act_text(reply),
                                 finish_reason="length" if reply.finish_reason == "length" else "stop", meta=meta))
        return out


def cut_at_stop(text: str, stop: list[str]) -> str:
    """`text` up to and including the first occurrence of any stop string (unchanged without one)."""
    ends = [i + len(st) for st in stop if st and (i := text.find(st)) >= 0]
    return text[: min(ends)] if ends else text


class ChatTextEngine:
    """`GenerationEngine` over an OpenAI-compatible chat client's raw text (see module doc)."""

    chat = True
    tokenizer = None

    def __init__(self, client: Any, *, name: str = "", chars_per_token: float = 4.0) -> None:
        self.client = client
        self.name = name
        self.chars_per_token = chars_per_token

    def count_tokens(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> int:
        return estimated_tokens(messages, tools, self.chars_per_token)

    def generate(self, requests: list[GenRequest]) -> list[GenResult]:
        out = []
        for req in requests:
            if req.messages is None:
                raise ValueError("ChatTextEngine needs GenRequest.messages (a chat-level request); the rollout "
                                 "sends them to engines with chat = True")
            res = self.client.chat(openai_messages(req.messages), temperature=req.temperature, top_p=req.top_p,
                                   max_tokens=req.max_new_tokens, seed=req.seed)
            raw = str(res.text or "")
            text = cut_at_stop(raw, list(req.stop))
            stopped = len(text) < len(raw) or res.finish_reason != "length"
            out.append(GenResult(token_ids=[], logprobs=[], text=text, finish_reason="stop" if stopped else "length",
                                 meta={"finish_reason": res.finish_reason}))
        return out
