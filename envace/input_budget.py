"""The input budget: every size limit on input that envace did not write itself, in one place.

Each `Budget` has a default, a unit and an environment variable that changes it (`ENVACE_MAX_...`, a
positive integer, read at each check so a test or a shell can raise it without a restart). Every
boundary checks its budget before it renders, tokenises, allocates or trains, and a refusal has one
shape, `BudgetError`: one line naming the file / field / request part, the size, the limit and the
setting that raises it:

    <where>: <subject> 7340032 bytes, over the limit of 1000000; <fix>, or raise the limit with
    ENVACE_MAX_MESSAGE_BYTES=<bytes>

A boundary with its own error type (ConfigError, DataError, ModelDirError, the server's 400) carries the
same text: `where`, `what` and `fix` are kept apart for that. The budgets are listed in `BUDGETS` (and in
docs/safety.md). Sizes are counted without building what they describe: YAML on its node graph, a model
on its config.json, a sweep on its axis sizes.

Also here, because several boundaries walk decoded JSON the same way: `text_problem`, the first string
of a value that holds a lone surrogate (which no tokenizer accepts) or is over a byte budget, with its
path.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from envace.untrusted import has_surrogate


class BudgetSettingError(ValueError):
    """An `ENVACE_MAX_*` variable that is not a positive integer."""


@dataclass(frozen=True)
class Budget:
    """One limit: `default` in `unit`s, changed by the environment variable `env`."""

    env: str
    default: int
    unit: str
    about: str  # one line for the docs: what it bounds and where

    def value(self) -> int:
        raw = os.environ.get(self.env, "").strip().replace("_", "")
        if not raw:
            return self.default
        try:
            n = int(raw)
        except ValueError:
            n = 0
        if n < 1:
            raise BudgetSettingError(f"{self.env}={os.environ[self.env]!r} is not a positive integer; set it to a "
                                     f"number of {self.unit} (default {self.default}) or unset it")
        return n

    def error(self, where: str, subject: str, size: int | None, fix: str, limit: int | None = None) -> BudgetError:
        """The refusal for `size` (None: counting stopped past the limit)."""
        return BudgetError(self, where, subject, size, self.value() if limit is None else limit, fix)

    def check(self, size: int, where: str, subject: str, fix: str) -> None:
        """Raise BudgetError when `size` is over the limit."""
        limit = self.value()
        if size > limit:
            raise BudgetError(self, where, subject, size, limit, fix)


class BudgetError(ValueError):
    """Input over a budget. `where` names the file / field / request part; `what` and `fix` are the two
    halves of the message (for boundaries that report through their own error type). `subject` ends in
    its verb: "messages[0].content is", "expands through YAML aliases to"."""

    def __init__(self, budget: Budget, where: str, subject: str, size: int | None, limit: int, fix: str) -> None:
        self.budget, self.where, self.size, self.limit = budget, where, size, limit
        self.what = (f"{subject} {size} {budget.unit}, over the limit of {limit}" if size is not None
                     else f"{subject} more than {limit} {budget.unit} (the limit)")
        self.fix = f"{fix}, or raise the limit with {budget.env}=<{budget.unit}>"
        super().__init__(f"{where}: {self.what}; {self.fix}" if where else f"{self.what}; {self.fix}")


MB = 1_000_000

YAML_BYTES = Budget("ENVACE_MAX_YAML_BYTES", 4 << 20, "bytes", "a config / sweep YAML file, before it is parsed")
YAML_VALUES = Budget("ENVACE_MAX_YAML_VALUES", 10_000, "values",  # the largest shipped config has ~200;
                     "values of a YAML file or `key=value` override once every alias is expanded")  # OmegaConf
# builds a nested value in ~0.5 ms: 10,000 values are seconds of work, 100,000 over a minute
YAML_CHARS = Budget("ENVACE_MAX_YAML_CHARS", 8 * MB, "characters",
                    "characters of the strings of a YAML file or override once every alias is expanded")
FIELD_BYTES = Budget("ENVACE_MAX_FIELD_BYTES", MB, "bytes",
                     "one string of a served request (content, name, tool-call arguments, a tool schema, "
                     "response_format, a stop string, a template argument)")
PROMPT_CHARS = Budget("ENVACE_MAX_PROMPT_CHARS", 4 * MB, "characters",
                      "a rendered chat prompt, before it is tokenised (and a request's text before rendering)")
MESSAGE_BYTES = Budget("ENVACE_MAX_MESSAGE_BYTES", MB, "bytes",
                       "one message (content and tool calls) or a row's tool schemas in a CM2 / verl data file")
RECORD_BYTES = Budget("ENVACE_MAX_RECORD_BYTES", 16 * MB, "bytes",
                      "one line of a JSON Lines data or worldbench file, before it is decoded")
MODEL_BYTES = Budget("ENVACE_MAX_MODEL_BYTES", 0, "bytes",
                     "memory a model's config.json implies (fp32 weights and rotary table), before it is built; "
                     "default: this machine's physical memory")
MODEL_LAYERS = Budget("ENVACE_MAX_MODEL_LAYERS", 1024, "layers", "num_hidden_layers of a model's config.json")
SWEEP_CELLS = Budget("ENVACE_MAX_SWEEP_CELLS", 1000, "cells", "cells of a sweep (axes x seeds), before expanding")

BUDGETS = (YAML_BYTES, YAML_VALUES, YAML_CHARS, FIELD_BYTES, PROMPT_CHARS, MESSAGE_BYTES, RECORD_BYTES,
           MODEL_BYTES, MODEL_LAYERS, SWEEP_CELLS)


def physical_memory() -> int:
    """Bytes of physical memory of this machine (a large number where the platform does not say)."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return 1 << 50


def model_bytes_limit() -> int:
    """MODEL_BYTES: the variable when set, else the machine's physical memory."""
    return MODEL_BYTES.value() if os.environ.get(MODEL_BYTES.env, "").strip() else physical_memory()


def utf8_size(text: str) -> int:
    """The UTF-8 size of `text` (lone surrogates count 3 bytes, as Python writes them)."""
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


def strings_in(value: Any) -> Iterator[str]:
    """Every string (values and keys) inside a decoded JSON value: the text it carries into a prompt,
    without its JSON punctuation. Iterative: a deeply nested value cannot exhaust the stack."""
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            yield v
        elif isinstance(v, dict):
            yield from (k for k in v if isinstance(k, str))
            stack.extend(v.values())
        elif isinstance(v, (list, tuple)):
            stack.extend(v)


def text_bytes(value: Any) -> int:
    """UTF-8 bytes of the text inside a decoded JSON value (`strings_in`)."""
    return sum(utf8_size(s) for s in strings_in(value))


def text_chars(value: Any) -> int:
    """Characters of the text inside a decoded JSON value (`strings_in`)."""
    return sum(len(s) for s in strings_in(value))


def _path(parts: tuple[Any, ...]) -> str:
    out = ""
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out or "<value>"


def text_problem(value: Any, prefix: str = "", max_bytes: int | None = None) -> tuple[str, str, int] | None:
    """The first string (value or key) of a decoded JSON value that holds a lone surrogate or, when
    `max_bytes` is given, is over that many UTF-8 bytes: (path, "surrogate" | "size", bytes), else None.
    Iterative, so a deep value cannot exhaust the stack."""
    stack: list[tuple[Any, tuple[Any, ...]]] = [(value, (prefix,) if prefix else ())]
    while stack:
        v, where = stack.pop()
        if isinstance(v, str):
            if has_surrogate(v):
                return _path(where), "surrogate", 0
            if max_bytes is not None and len(v) * 4 > max_bytes:  # 1 to 4 bytes a character: else it fits
                size = utf8_size(v)
                if size > max_bytes:
                    return _path(where), "size", size
        elif isinstance(v, dict):
            for k, x in v.items():
                if isinstance(k, str) and has_surrogate(k):
                    return _path(where), "surrogate", 0
                stack.append((x, (*where, k)))
        elif isinstance(v, (list, tuple)):
            stack.extend((x, (*where, i)) for i, x in enumerate(v))
    return None
