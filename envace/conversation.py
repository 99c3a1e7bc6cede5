"""Split a conversation into user turns, as the checklist judges see it.

A turn starts at a user message and runs to the next one. Its *calls* are the tool calls of its
assistant messages, its *final reply* is the content of its last assistant message when that message
makes no tool call (a turn cut off mid-call has no reply), and it *failed a tool call* when one of its
tool messages reports an error (`envace.execution_result.is_error_text`: a JSON object, or an array holding
one, with an "error" or "error_tool_call" key; the CM2 / EnvACE convention), whoever wrote it.
Messages before the first user message (the system prompt) belong to no turn.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from envace.execution_result import is_error_text
from envace.types import Message, ToolCall


@dataclass
class TurnView:
    index: int
    user: str
    messages: list[Message] = field(default_factory=list)  # everything after the user message

    @property
    def calls(self) -> list[ToolCall]:
        return [c for m in self.messages if m.role == "assistant" for c in m.tool_calls]

    @property
    def final_reply(self) -> str:
        last = next((m for m in reversed(self.messages) if m.role == "assistant"), None)
        return last.content if last is not None and not last.tool_calls else ""

    @property
    def tool_failed(self) -> bool:
        return any(m.role == "tool" and is_error_result(m.content) for m in self.messages)


def is_error_result(text: str) -> bool:
    """The tool message reports a failed call (envace.execution_result.is_error_text, the one predicate)."""
    return is_error_text(text)


def split_turns(messages: list[Message]) -> list[TurnView]:
    turns: list[TurnView] = []
    for m in messages:
        if m.role == "user":
            turns.append(TurnView(index=len(turns), user=m.content))
        elif turns:
            turns[-1].messages.append(m)
    return turns


def contains_phrase(text: str, phrase: str) -> bool:
    """Case-insensitive match of `phrase` as whole words, whitespace-normalised: "apple: 42" matches
    "apple: 42, rice: 7" but not "apple: 421", and "9" does not match inside "19"."""
    norm = lambda s: re.sub(r"\s+", " ", s.strip().lower())  # noqa: E731
    p = norm(phrase)
    if not p:
        return True
    return re.search(rf"(?<!\w){re.escape(p)}(?!\w)", norm(text)) is not None
