"""Chat on top of a local `GenerationEngine`: OpenAI messages + tools in, assistant text and parsed Hermes
tool calls out. `envace serve` (server.py) puts it behind HTTP; `HFChatPolicy` is the in-process
`BenchPolicy`.

Per request: normalise the messages (JSON-string arguments become objects, as vLLM does), render them
with the model's chat template, refuse a prompt that does not fit the context (`ContextLengthExceeded`:
the model's own max_position_embeddings unless a limit is given, as `envace serve`; never truncated),
generate with a per-request seed, cut at the first stop string (not
returned), split off `<think>` reasoning, parse `<tool_call>` blocks (a malformed block leaves the whole
text as content, as vLLM's hermes parser). Departure from vLLM: `json_schema` is best effort (an
instruction in the system prompt, the first JSON value of the reply returned), not constrained decoding.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envace.chat_tokens import RenderedTooLong, encode_chat
from envace.engines.base import GenerationEngine, GenRequest
from envace.engines.reply import AssistantReply
from envace.input_budget import PROMPT_CHARS
from envace.roles.act import END_MARKERS
from envace.toolcall import parse_tool_calls
from envace.types import ErrorCode, ToolCall

JSON_INSTRUCTION = "Respond only with one JSON value that matches this JSON schema:\n{schema}"


class ChatRequestError(ValueError):
    """The request cannot be served (bad messages, prompt too long); the message says why."""


class ContextLengthExceeded(ChatRequestError):
    """The prompt (plus the tokens asked for) does not fit the model's context: never truncated, never run
    past the positions the model was trained on; the benchmark records it as that task's error."""

    def __init__(self, limit: int, prompt_tokens: int, max_tokens: int, at_least: bool = False) -> None:
        has = f"has at least {prompt_tokens} (measured before tokenising)" if at_least else f"has {prompt_tokens}"
        super().__init__(f"this model's maximum context length is {limit} tokens; the prompt {has} "
                         f"and max_tokens asks for {max_tokens} more")
        self.limit, self.prompt_tokens, self.max_tokens = limit, prompt_tokens, max_tokens


def longest_token_chars(tokenizer: Any) -> int:
    """Most text characters one token can stand for: the longest vocabulary string (byte-level BPE
    writes one character per byte, and a text character is at least one byte). So a text of C characters
    is at least ceil(C / longest) tokens: what lets a prompt be refused before it is tokenised."""
    return max((len(t) for t in tokenizer.get_vocab()), default=1) or 1


def model_context_len(engine: GenerationEngine) -> int | None:
    """The model's own context length (config.max_position_embeddings), when it declares one."""
    config = getattr(getattr(engine, "model", None), "config", None)
    value = getattr(config, "max_position_embeddings", None)
    return int(value) if isinstance(value, int) and value > 0 else None


@dataclass
class LocalChoice:
    content: str
    tool_calls: list[ToolCall] = field(default_factory=list)
    finish_reason: str = "stop"
    reasoning: str = ""
    completion_tokens: int = 0
    parse_error: ErrorCode | None = None
    detail: str = ""
    raw_text: str = ""


def normalize_messages(messages: list[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Copy OpenAI messages into the shape chat templates expect. Raises ChatRequestError on bad input."""
    if not isinstance(messages, list) or not messages:
        raise ChatRequestError("messages must be a non-empty list of {role, content} objects")
    out: list[dict[str, Any]] = []
    for i, m in enumerate(messages):
        if not isinstance(m, Mapping) or not isinstance(m.get("role"), str):
            raise ChatRequestError(f"messages[{i}] must be an object with a string 'role'")
        msg = dict(m)
        content = msg.get("content")
        if content is None:
            content = ""
        elif isinstance(content, list):
            content = "".join(p.get("text", "") for p in content if isinstance(p, Mapping))
        elif not isinstance(content, str):
            raise ChatRequestError(f"messages[{i}].content must be a string, a list of parts or null")
        msg["content"] = content
        if msg.get("tool_calls"):
            calls = []
            for call in msg["tool_calls"]:
                call = dict(call)
                fn = dict(call.get("function") or {})
                args = fn.get("arguments")
                if isinstance(args, str):
                    try:
                        fn["arguments"] = json.loads(args) if args.strip() else {}
                    except json.JSONDecodeError:
                        pass  # template writes the string verbatim, as the model wrote it
                call["function"] = fn
                calls.append(call)
            msg["tool_calls"] = calls
        out.append(msg)
    return out


def _with_json_instruction(messages: list[dict[str, Any]], schema: Mapping[str, Any]) -> list[dict[str, Any]]:
    note = JSON_INSTRUCTION.format(schema=json.dumps(schema, ensure_ascii=False))
    if messages[0]["role"] == "system":
        return [{**messages[0], "content": messages[0]["content"] + "\n\n" + note}] + messages[1:]
    return [{"role": "system", "content": note}] + messages


def extract_json(text: str) -> str | None:
    """The first JSON object/array in `text` (as written), or None."""
    stripped = text.strip()
    try:
        json.loads(stripped)
        return stripped
    except ValueError:
        pass
    decoder = json.JSONDecoder()
    for i, ch in enumerate(text):
        if ch in "{[":
            try:
                _, end = decoder.raw_decode(text, i)
                return text[i:end]
            except ValueError:
                continue
    return None


def split_reasoning(text: str) -> tuple[str, str]:
    """(reasoning, content): Qwen3 writes `<think>...</think>` before the answer."""
    if "</think>" not in text:
        return "", text
    head, tail = text.split("</think>", 1)
    return head.split("<think>", 1)[-1].strip(), tail.lstrip("\n")


class LocalChatModel:
    """One local model behind a lock (HFEngine is not thread-safe; the server answers one at a time)."""

    def __init__(self, engine: GenerationEngine, name: str, max_model_len: int | None = None,
                 default_max_tokens: int = 512) -> None:
        self.engine, self.tokenizer = engine, engine.tokenizer
        self.name, self.max_model_len, self.default_max_tokens = name, max_model_len, default_max_tokens
        if not getattr(self.tokenizer, "chat_template", None):
            raise ChatRequestError(f"model {name!r} has no chat template; save one with the tokenizer "
                                   f"(tokenizer.chat_template = ...; tokenizer.save_pretrained(dir))")
        self._lock = threading.Lock()
        self._token_chars: int | None = None

    @property
    def token_chars(self) -> int:
        """longest_token_chars of the tokenizer (computed once)."""
        if self._token_chars is None:
            self._token_chars = longest_token_chars(self.tokenizer)
        return self._token_chars

    @classmethod
    def guarded(cls, engine: GenerationEngine, name: str, max_model_len: int | None = None) -> LocalChatModel:
        """A chat model whose requests must fit `max_model_len` (None: the model's own context length)."""
        return cls(engine, name, max_model_len if max_model_len is not None else model_context_len(engine))

    @classmethod
    def from_dir(cls, model_dir: str | Path, *, name: str | None = None, device: str | None = None,
                 max_model_len: int | None = None) -> LocalChatModel:
        from envace.engines.hf import HFEngine

        path = Path(model_dir)
        return cls(HFEngine.from_path(path, device=device), name or path.name, max_model_len)

    def render(self, messages: list[Mapping[str, Any]], tools: list[dict[str, Any]] | None = None,
               json_schema: Mapping[str, Any] | None = None,
               chat_template_kwargs: Mapping[str, Any] | None = None, *, max_model_len: int | None = None,
               max_tokens: int = 1) -> tuple[str, list[int]]:
        """(text, ids) of the prompt. The rendered text is measured before it is tokenised: over the prompt
        budget (envace.input_budget.PROMPT_CHARS) it is a ChatRequestError; more characters than
        `max_model_len` tokens can hold, ContextLengthExceeded."""
        msgs = normalize_messages(messages)
        if json_schema is not None:
            msgs = _with_json_instruction(msgs, json_schema)
        budget = PROMPT_CHARS.value()
        fits = max_model_len * self.token_chars if max_model_len is not None else budget
        try:  # control strings in request text are encoded as ordinary text (envace.chat_tokens)
            enc = encode_chat(self.tokenizer, msgs, tools=tools or None, add_generation_prompt=True,
                              max_chars=min(budget, fits), **dict(chat_template_kwargs or {}))
        except RenderedTooLong as exc:
            if exc.chars > fits and max_model_len is not None:
                least = -(-exc.chars // self.token_chars)
                raise ContextLengthExceeded(max_model_len, least, max_tokens, at_least=True) from None
            raise ChatRequestError(str(PROMPT_CHARS.error("", "the rendered prompt is", exc.chars,
                                                          "shorten the messages"))) from None
        except Exception as exc:  # jinja errors of any kind: the request does not fit the template
            raise ChatRequestError(f"chat template of {self.name!r} failed on these messages: {exc}") from exc
        return enc.text, enc.ids

    def generate(self, messages: list[Mapping[str, Any]], *, tools: list[dict[str, Any]] | None = None,
                 temperature: float = 1.0, top_p: float = 1.0, max_tokens: int | None = None,
                 seed: int | None = None, n: int = 1, stop: list[str] | None = None,
                 json_schema: Mapping[str, Any] | None = None, parse_tools: bool = True,
                 chat_template_kwargs: Mapping[str, Any] | None = None,
                 max_model_len: int | None = None) -> tuple[list[LocalChoice], int]:
        """`n` choices and the prompt length in tokens. `max_model_len` overrides the model's limit for this
        request; a prompt that does not fit raises `ContextLengthExceeded` before anything is generated."""
        if n < 1:
            raise ChatRequestError(f"n={n} must be >= 1")
        limit = max_model_len if max_model_len is not None else self.max_model_len
        _, prompt_ids = self.render(messages, tools, json_schema, chat_template_kwargs, max_model_len=limit,
                                    max_tokens=max_tokens or 1)
        budget = max_tokens if max_tokens is not None else self.default_max_tokens
        if max_tokens is None and limit is not None:  # as vLLM: what the prompt leaves, here capped
            budget = min(budget, max(1, limit - len(prompt_ids)))
        if budget < 1:
            raise ChatRequestError(f"max_tokens={budget} must be >= 1")
        if limit is not None and len(prompt_ids) + budget > limit:
            raise ContextLengthExceeded(limit, len(prompt_ids), budget)
        stops = [s for s in (stop or []) if s]
        reqs = [GenRequest(prompt_ids=prompt_ids, temperature=temperature, top_p=top_p, max_new_tokens=budget,
                           stop=stops, seed=None if seed is None else seed + i) for i in range(n)]
        with self._lock:
            results = self.engine.generate(reqs)
        choices = [self._choice(r.text, r.finish_reason, len(r.token_ids), stops, tools if parse_tools else None,
                                json_schema) for r in results]
        return choices, len(prompt_ids)

    @staticmethod
    def _choice(text: str, finish: str, n_tokens: int, stops: list[str], tools: list[dict[str, Any]] | None,
                json_schema: Mapping[str, Any] | None) -> LocalChoice:
        raw = text
        for marker in END_MARKERS:  # engines normally leave eos out of the text; whitespace is kept as generated
            if raw.endswith(marker):
                raw = raw[: -len(marker)]
        hits = [raw.index(s) for s in stops if s in raw]
        if hits:
            raw, finish = raw[:min(hits)], "stop"
        reasoning, content = split_reasoning(raw)
        if json_schema is not None:
            found = extract_json(content)
            content = found if found is not None else content
        choice = LocalChoice(content=content, finish_reason=finish, reasoning=reasoning,
                             completion_tokens=n_tokens, raw_text=raw)
        if tools:
            parsed = parse_tool_calls(content)
            if parsed.error is None:
                for c in parsed.calls:
                    c.id = f"call_{uuid.uuid4().hex[:24]}"
                choice.tool_calls, choice.content, choice.finish_reason = parsed.calls, parsed.content, "tool_calls"
            elif parsed.error is not ErrorCode.NO_TOOL_CALL:
                choice.parse_error, choice.detail = parsed.error, parsed.detail
        return choice


class HFChatPolicy:
    """`BenchPolicy` over a `LocalChatModel` (in-process, no HTTP)."""

    def __init__(self, model: LocalChatModel, temperature: float = 0.0, top_p: float = 1.0,
                 max_tokens: int | None = None, name: str | None = None,
                 chat_template_kwargs: Mapping[str, Any] | None = None, max_model_len: int | None = None) -> None:
        self.model = model
        self.temperature, self.top_p, self.max_tokens = temperature, top_p, max_tokens
        self.max_model_len = max_model_len  # None: the model's own limit (LocalChatModel.max_model_len)
        self.chat_template_kwargs = dict(chat_template_kwargs or {})
        self.name = name or f"{model.name} (local)"

    def reply(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], *, seed: int | None = None,
              context: Mapping[str, Any] | None = None) -> AssistantReply:
        choices, prompt_tokens = self.model.generate(
            messages, tools=tools, temperature=self.temperature, top_p=self.top_p, max_tokens=self.max_tokens,
            seed=seed, chat_template_kwargs=self.chat_template_kwargs, max_model_len=self.max_model_len)
        c = choices[0]
        return AssistantReply(content=c.content, tool_calls=c.tool_calls, finish_reason=c.finish_reason,
                              usage={"prompt_tokens": prompt_tokens, "completion_tokens": c.completion_tokens},
                              parse_error=c.parse_error, detail=c.detail, reasoning=c.reasoning)
