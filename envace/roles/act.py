"""The Act role: prompt building and output parsing.

Act is "the assistant" of the model's own tool-calling chat template: the prompt is the history rendered
with the task's tool schemas; the output is Hermes `<tool_call>` blocks or plain text (the reply). The
assistant message that goes back into the history holds the parsed content and calls (what chat-level
engines and transcripts see); token-level prompts carry the turn's sampled ids instead (the rollout sets
`Message.token_ids`; envace.chat_tokens). Departures from the reference:
- earlier Act turns are their sampled tokens, not a re-rendering of the parsed message (no token drift);
- a malformed Act output goes back into the history as its raw text with no calls, followed by an error
  tool message (re-rendering a half-parsed message would hide what the model wrote).
"""

from __future__ import annotations

from typing import Any

from envace.chat_tokens import EncodedChat, encode_chat
from envace.toolcall import END_MARKERS, ParsedAct, check_arguments, parse_tool_calls, strip_end_markers, strip_think
from envace.types import ErrorCode, Message
from envace.untrusted import clean_text, short

__all__ = ["END_MARKERS", "act_prompt", "act_prompt_ids", "assistant_message", "chat_ids", "is_malformed", "parse_act",
           "strip_end_markers", "tool_names"]


def chat_ids(tokenizer: Any, conversation: list[dict[str, Any]], *, tools: list[dict] | None = None,
             enable_thinking: bool = True, sampled: list[list[int] | None] | None = None) -> list[int]:
    """Token ids of `conversation` rendered by the tokenizer's chat template with a generation prompt.

    Control tokens come only from the template: a control string inside any content, tool argument or
    tool schema is encoded as ordinary text; `sampled[i]` (the ids the model sampled for assistant
    message i) is carried verbatim (envace.chat_tokens).
    """
    return encode_chat(tokenizer, conversation, tools=tools or None, add_generation_prompt=True,
                       sampled=sampled, enable_thinking=enable_thinking).ids


def act_prompt(tokenizer: Any, messages: list[Message], tools: list[dict[str, Any]], *,
               enable_thinking: bool = True) -> EncodedChat:
    """The Act prompt, its text and ids: the history so far, with the sample's tools, ending in the assistant
    header (control tokens only from the template, as `chat_ids`)."""
    return encode_chat(tokenizer, [m.to_openai() for m in messages], tools=tools or None, add_generation_prompt=True,
                       enable_thinking=enable_thinking)


def act_prompt_ids(tokenizer: Any, messages: list[Message], tools: list[dict[str, Any]], *,
                   enable_thinking: bool = True) -> list[int]:
    """The Act prompt's token ids (`act_prompt`)."""
    return act_prompt(tokenizer, messages, tools, enable_thinking=enable_thinking).ids


def tool_names(tools: list[dict[str, Any]]) -> list[str]:
    return [t.get("function", t).get("name", "") for t in tools]


def parse_act(text: str, tools: list[dict[str, Any]]) -> ParsedAct:
    """Parse one Act output against the sample's tools. Never raises.

    Beyond `parse_tool_calls` (format, JSON, name whitelist), every call is checked against its JSON
    schema; the first violation makes the whole output an INVALID_PARAMETERS (or TOOL_NOT_AVAILABLE)
    error, with all parsed calls kept for the record.
    """
    parsed = parse_tool_calls(strip_end_markers(text if isinstance(text, str) else str(text)), tool_names(tools))
    if parsed.error is not None:
        return parsed
    for call in parsed.calls:
        try:
            problem = check_arguments(call, tools)
        except Exception as exc:  # a schema the checker cannot read must not crash a rollout
            problem = (ErrorCode.INVALID_PARAMETERS, f"could not check arguments of {call.name!r}: {exc!r}")
        if problem is not None:
            return ParsedAct(calls=parsed.calls, content=parsed.content, error=problem[0],
                             detail=short(f"{call.name}: {problem[1]}"))
    return parsed


def is_malformed(parsed: ParsedAct) -> bool:
    """True for an output that tried to call a tool and failed (any error except NO_TOOL_CALL)."""
    return parsed.error is not None and parsed.error is not ErrorCode.NO_TOOL_CALL


def assistant_message(parsed: ParsedAct, raw_text: str | None = None) -> Message:
    """The assistant message that goes back into the Act history.

    Valid output → parsed content + parsed calls (the template re-renders the calls canonically).
    Malformed output → its visible raw text (think stripped) and no calls, when `raw_text` is given.
    """
    if is_malformed(parsed) and raw_text is not None:  # raw model text: sanitised before any tokenizer sees it
        return Message(role="assistant", content=strip_end_markers(strip_think(clean_text(raw_text))).strip())
    calls = [] if is_malformed(parsed) else list(parsed.calls)
    return Message(role="assistant", content=parsed.content, tool_calls=calls)
