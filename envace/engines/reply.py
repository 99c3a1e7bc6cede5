"""The chat-level policy contract: `BenchPolicy.reply(messages, tools) -> AssistantReply`.

Benchmarks, the user simulator and the chat rollout talk chat messages + OpenAI tool schemas, not token
ids. Implemented by `envace.engines.openai_client.OpenAIPolicy` (any OpenAI-compatible endpoint) and
`envace.engines.chat_model.HFChatPolicy` (a local HF model dir, no HTTP); consumed by
`envace.benchmarks` and `envace.rollout`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from envace.types import ErrorCode, ToolCall


@dataclass
class AssistantReply:
    """One assistant turn produced by a policy. Malformed model output is classified in `parse_error`
    (the calls are then empty and `content` holds the raw text), never raised."""

    content: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    finish_reason: str = "stop"
    usage: dict[str, int] = field(default_factory=dict)
    parse_error: ErrorCode | None = None
    detail: str = ""
    reasoning: str = ""  # reasoning text the server split off (vLLM reasoning parser / <think>)

    def to_message(self) -> dict[str, Any]:
        """The OpenAI assistant message to append to the chat history (arguments as JSON strings, every
        call with an id so tool results can refer to it)."""
        msg: dict[str, Any] = {"role": "assistant", "content": self.content}
        if self.tool_calls:
            msg["tool_calls"] = [
                {"id": c.id or f"call_{i}", "type": "function",
                 "function": {"name": c.name, "arguments": json.dumps(c.arguments, ensure_ascii=False)}}
                for i, c in enumerate(self.tool_calls)]
        return msg


@runtime_checkable
class BenchPolicy(Protocol):
    """The model under evaluation (or a user simulator): chat messages + tools in, one reply out.

    `context` says where in a benchmark the call is made (benchmark, entry id, category, sample, turn,
    step). Real policies must ignore it; scripted test policies (gold replay) use it to find their answer.
    Transport failures (server unreachable after retries) raise; bad model output does not.
    """

    name: str

    def reply(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], *, seed: int | None = None,
              context: Mapping[str, Any] | None = None) -> AssistantReply: ...
