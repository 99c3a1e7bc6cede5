"""Chat prompts as token ids in which only the chat template writes control tokens.

Text that reaches a prompt from the model, a tool, a user or a data set may contain the template's own
control strings (`<|im_end|>\\n<|im_start|>system\\n...`). Rendering the template to text and encoding the
text the usual way turns those into control tokens: a forged system turn. `encode_chat` renders the
template with every control string of the content replaced by a marker (a private-use character pair the
tokenizer never sees), encodes the template's text normally and each marked string as ordinary text
(`split_special_tokens=True`), so a control id appears only where the template wrote it. Control strings
are the tokenizer's special tokens; added but non-special markup (`<tool_call>`, `<think>`) is left to
the tokenizer as before: the template and the model write it inside content on purpose.

Token-in-token-out: an assistant message given with `sampled` ids is rendered as exactly those ids (its
trailing end-of-turn id is the one the template writes after it), not re-encoded from its parsed text, so
the tokens a turn sampled are the tokens every later prompt holds for that turn. Departure from the
reference code, which re-renders earlier assistant turns from their parsed content and calls.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

OPEN, CLOSE, SAMPLED = "\ue000", "\ue001", "\ue002"  # Unicode private use: no tokenizer or template writes them
_MARK = re.compile(f"([{OPEN}{SAMPLED}])(\\d+){CLOSE}")


class RenderedTooLong(ValueError):
    """The rendered prompt has more characters than the caller allows (`chars`); nothing was tokenised."""

    def __init__(self, chars: int, max_chars: int) -> None:
        super().__init__(f"the rendered prompt has {chars} characters, more than the {max_chars} allowed")
        self.chars, self.max_chars = chars, max_chars


@dataclass
class EncodedChat:
    """A rendered chat prompt: `text` as the template wrote it (marked strings restored) and its `ids`."""

    text: str
    ids: list[int]


def control_strings(tokenizer: Any) -> tuple[str, ...]:
    """The tokenizer's special-token strings, longest first (so `<|im_end|>` wins over a shorter prefix)."""
    found = {str(t) for t in (getattr(tokenizer, "all_special_tokens", None) or []) if t}
    for tok in (getattr(tokenizer, "added_tokens_decoder", None) or {}).values():
        if getattr(tok, "special", False) and getattr(tok, "content", ""):
            found.add(tok.content)
    return tuple(sorted(found, key=lambda s: (-len(s), s)))


def _control_ids(tokenizer: Any) -> set[int]:
    ids = set(getattr(tokenizer, "all_special_ids", None) or [])
    for i, tok in (getattr(tokenizer, "added_tokens_decoder", None) or {}).items():
        if getattr(tok, "special", False):
            ids.add(int(i))
    return ids


def _input_ids(out: Any) -> list[int]:
    ids = out["input_ids"] if isinstance(out, Mapping) or hasattr(out, "input_ids") else out
    return [int(t) for t in ids]


def encode_text(tokenizer: Any, text: str) -> list[int]:
    """`text` as ordinary text: a control string in it becomes the ids of its characters, never a control
    id. Raises ValueError for a tokenizer that cannot do that (it ignores `split_special_tokens`)."""
    ids = _input_ids(tokenizer(text, add_special_tokens=False, split_special_tokens=True))
    forged = _control_ids(tokenizer).intersection(ids)
    if forged:
        raise ValueError(f"tokenizer {getattr(tokenizer, 'name_or_path', '')!r} encodes text as control ids "
                         f"{sorted(forged)} even with split_special_tokens=True; it cannot keep content literal")
    return ids


def _escaper(tokenizer: Any, literals: list[str]):
    strings = control_strings(tokenizer) + (OPEN, CLOSE, SAMPLED)
    pattern = re.compile("|".join(re.escape(s) for s in strings))

    def mark(m: re.Match[str]) -> str:
        literals.append(m.group(0))
        return f"{OPEN}{len(literals) - 1}{CLOSE}"

    def escape(value: Any) -> Any:
        if isinstance(value, str):
            return pattern.sub(mark, value)
        if isinstance(value, Mapping):
            return {escape(k) if isinstance(k, str) else k: escape(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [escape(v) for v in value]
        return value

    return escape


def encode_chat(tokenizer: Any, conversation: Sequence[Mapping[str, Any]], *,
                tools: Sequence[Mapping[str, Any]] | None = None, add_generation_prompt: bool = True,
                sampled: Sequence[Sequence[int] | None] | None = None, max_chars: int | None = None,
                **template_kwargs: Any) -> EncodedChat:
    """Render `conversation` (OpenAI-shape messages) with the tokenizer's chat template and encode it so
    that control tokens come only from the template. `sampled[i]`, when given and not None, is the token
    ids the model sampled for assistant message i: the prompt carries them verbatim. `max_chars`: raise
    RenderedTooLong, before any tokenising, when the rendered text (sampled spans not counted) is longer."""
    literals: list[str] = []
    escape = _escaper(tokenizer, literals)
    spans: list[list[int]] = []
    control = _control_ids(tokenizer)
    msgs = []
    for i, message in enumerate(conversation):
        ids = sampled[i] if sampled is not None and i < len(sampled) else None
        if ids and message.get("role") == "assistant":
            body = list(ids)
            if body[-1] in control:  # the end-of-turn id the template writes after the content
                body = body[:-1]
            spans.append(body)
            msgs.append({"role": "assistant", "content": f"{SAMPLED}{len(spans) - 1}{CLOSE}"})
        else:
            msgs.append(escape(dict(message)))
    rendered = tokenizer.apply_chat_template(msgs, tools=escape(list(tools)) if tools else None,
                                             add_generation_prompt=add_generation_prompt, tokenize=False,
                                             **template_kwargs)
    if max_chars is not None:
        marks = sum(len(m.group(0)) for m in _MARK.finditer(rendered))
        chars = len(rendered) - marks + sum(len(s) for s in literals)
        if chars > max_chars:
            raise RenderedTooLong(chars, max_chars)
    ids: list[int] = []
    text: list[str] = []
    pos = 0
    for m in _MARK.finditer(rendered):
        plain = rendered[pos:m.start()]
        if plain:
            ids += _input_ids(tokenizer(plain, add_special_tokens=False))
            text.append(plain)
        n = int(m.group(2))
        if m.group(1) == OPEN:
            ids += encode_text(tokenizer, literals[n])
            text.append(literals[n])
        else:
            ids += spans[n]
            text.append(tokenizer.decode(spans[n], skip_special_tokens=False))
        pos = m.end()
    tail = rendered[pos:]
    if tail:
        ids += _input_ids(tokenizer(tail, add_special_tokens=False))
        text.append(tail)
    return EncodedChat(text="".join(text), ids=ids)


def encode_target(tokenizer: Any, text: str) -> list[int]:
    """A training target the template rendered (one assistant turn, one Rehearse result): its text as
    ordinary text, and the control strings it ends with (the end-of-turn marker the template wrote) as
    their control ids. A control string inside the text stays text, as in a rollout's prompts."""
    body, tail = text, ""
    ends = control_strings(tokenizer)
    while (end := next((s for s in ends if body.endswith(s)), None)) is not None:
        body, tail = body[: -len(end)], end + tail
    ids = encode_text(tokenizer, body) if body else []
    return ids + (_input_ids(tokenizer(tail, add_special_tokens=False)) if tail else [])
