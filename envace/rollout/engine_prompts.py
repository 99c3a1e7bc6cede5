"""How a conversation becomes a generation engine's prompt: token ids rendered by the engine's chat template
(envace.roles.act.chat_ids: control tokens only where the template writes them, earlier turns as the ids
they sampled), or, for a chat-level engine (an OpenAI endpoint behind envace.rollout.chat_engine), the
messages themselves with the engine's own token count. The rollout machine and test-time rehearsal build
every prompt through `prompt_of`.
"""

from __future__ import annotations

from typing import Any

from envace.engines.base import GenerationEngine
from envace.roles.act import chat_ids


def is_chat_engine(engine: object) -> bool:
    return bool(getattr(engine, "chat", False))


def prompt_of(engine: GenerationEngine, conversation: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
              *, enable_thinking: bool = True,
              sampled: list[list[int] | None] | None = None) -> tuple[list[int], list[dict[str, Any]] | None, int]:
    """(prompt ids, chat messages, prompt length in tokens) of an OpenAI-shape conversation for `engine`:
    token ids from its chat template (`sampled[i]`: assistant message i's own sampled ids, carried
    verbatim), or (chat engines) the messages themselves."""
    if is_chat_engine(engine):
        return [], conversation, int(engine.count_tokens(conversation, tools))  # type: ignore[attr-defined]
    ids = chat_ids(engine.tokenizer, conversation, tools=tools, enable_thinking=enable_thinking, sampled=sampled)
    return ids, None, len(ids)
