"""The worldbench transition record and the one rule that turns a real tool response into a JSON value.

A `Transition` is one executed call: the tools offered, the conversation before the call (OpenAI chat
messages: user turns, earlier calls and their real responses), the call, the environment's response
text, the environment's own error signal and the response as a Rehearse target value (`target_value`).
Files are JSON Lines, one transition per line; `read_transitions` checks each record's shape as it loads
(every field's type, each history entry a chat message, each tool a function schema, no lone surrogate,
each line within envace.input_budget.RECORD_BYTES, UTF-8, decodable depth) and names the file, line and
field of a bad record, so scoring never meets a value of the wrong type.

`target_value` departs from the raw text where the Rehearse format cannot hold it: the format carries a
non-empty JSON object or array, so a JSON object / array response is kept as it is, an error that is not
one (τ²'s "Error: ..." text, BFCL's "Error during execution: ...") becomes
`{"error_tool_call": {"code": "TOOL_ERROR", "message": <text>}}` (envace's error object), and any other
response (a plain string, a number, an empty object) becomes `{"result": <value>}`.

`is_error_value` (envace.execution_result's, the predicate the episode rules, the checklist and fidelity
use) is the prediction side of error agreement: a value is an error when it is (or, for a
list, holds) an object with an `error_tool_call` or `error` key; the builder's tests check that it agrees
with every environment's own error signal on every recorded response.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

from envace.execution_result import ERROR_KEY
from envace.input_budget import RECORD_BYTES, text_problem
from envace.types import ErrorCode

ROLES = ("system", "user", "assistant", "tool")
REBUILD = "rebuild with `envace worldbench build`"


class Source(str, Enum):
    """The built-in sources. A benchmark registered with a `transitions` function (docs/extending.md, "A fifth
    benchmark") is a source too: `Source("<its name>")` makes it a member on first use (iterating `Source`
    lists the built-ins only)."""

    TAU2 = "tau2"
    BFCL = "bfcl"
    VITA = "vita"
    WORLD = "world"

    @classmethod
    def _missing_(cls, value: object) -> Source | None:
        from envace.benchmarks.transitions import has_transitions

        if not isinstance(value, str) or not has_transitions(value):
            return None
        member = str.__new__(cls, value)
        member._name_, member._value_ = value.upper(), value
        return cls._value2member_map_.setdefault(value, member)


def source_named(name: str) -> Source | None:
    """The source called `name` (a built-in, or a registered benchmark with transitions), else None."""
    try:
        return Source(name)
    except ValueError:
        return None


class CallKind(str, Enum):
    """A gold call, or how a gold call was perturbed before it was executed."""

    GOLD = "gold"
    WRONG_ID = "wrong_id"  # an id argument changed to one that (most likely) does not exist
    OUT_OF_RANGE = "out_of_range"  # a number made negative, or an enum value outside its enum
    MISSING_ARG = "missing_arg"  # one required argument dropped


class Split(str, Enum):
    TRAIN = "train"  # few-shot examples and the reference rows' fallbacks come from here
    TEST = "test"  # scored


def safe_name(name: str) -> str:
    """A row name as a file name and MLflow metric-key part (characters outside [A-Za-z0-9_.-] become `_`)."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("_") or "model"


def _loads(text: str) -> tuple[bool, Any]:
    try:
        return True, json.loads(text)
    except (json.JSONDecodeError, TypeError, ValueError, RecursionError):
        return False, None


def target_value(response: str, is_error: bool) -> Any:
    """The Rehearse target value of a real response text (see the module docstring)."""
    ok, parsed = _loads(response)
    if ok and isinstance(parsed, (dict, list)) and parsed:
        return parsed
    if is_error:
        return {ERROR_KEY: {"code": ErrorCode.TOOL_ERROR.value, "message": response}}
    return {"result": parsed if ok else response}


@dataclass
class Transition:
    id: str  # "<source>/<domain>/<task>/<position>/<kind>": unique in a build
    source: Source
    domain: str
    task_id: str
    split: Split
    position: int  # the call's index in the task's gold call sequence (a perturbed call replaces it)
    kind: CallKind
    tools: list[dict[str, Any]]  # OpenAI function schemas offered with the call
    history: list[dict[str, Any]]  # OpenAI chat messages before the call
    call: dict[str, Any]  # {"name": str, "arguments": {...}}
    response: str  # the environment's response text, as it returned it
    is_error: bool  # the environment's own error signal
    value: Any = None  # target_value(response, is_error); filled in when None
    result_schema: dict[str, Any] | None = None  # the tool's declared result schema (BFCL's `response`)
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.source, self.kind, self.split = Source(self.source), CallKind(self.kind), Split(self.split)
        if self.value is None:
            self.value = target_value(self.response, self.is_error)

    @property
    def tool(self) -> str:
        return str(self.call.get("name", ""))

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.update(source=self.source.value, kind=self.kind.value, split=self.split.value)
        return d

    @classmethod
    def from_dict(cls, d: Any, where: str = "transition") -> Transition:
        if not isinstance(d, dict):
            raise ValueError(f"{where}: a transition must be a JSON object, got {type(d).__name__}")
        required = ("id", "source", "domain", "task_id", "split", "position", "kind", "tools", "history", "call",
                    "response", "is_error")
        missing = [k for k in required if k not in d]
        if missing:
            raise ValueError(f"{where}: missing field(s) {missing}; rebuild with `envace worldbench build`")
        call = d["call"]
        if not isinstance(call, dict) or not isinstance(call.get("name"), str) \
                or not isinstance(call.get("arguments"), dict):
            raise ValueError(f"{where}: field 'call' must be {{'name': str, 'arguments': object}}, got {call!r:.120}")
        for name, typ in (("tools", list), ("history", list), ("response", str), ("is_error", bool),
                          ("position", int), ("id", str), ("domain", str), ("task_id", str), ("meta", dict)):
            if name in d and (not isinstance(d[name], typ) or (typ is int and isinstance(d[name], bool))):
                raise ValueError(f"{where}: field {name!r} must be {typ.__name__}, got {type(d[name]).__name__}")
        if d.get("result_schema") is not None and not isinstance(d["result_schema"], dict):
            raise ValueError(f"{where}: field 'result_schema' must be an object or null, got "
                             f"{type(d['result_schema']).__name__}; {REBUILD}")
        problem = _shape_problem(d["history"], d["tools"]) or _surrogate(d)
        if problem is not None:
            raise ValueError(f"{where}: {problem}; {REBUILD}")
        try:
            return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})
        except ValueError as exc:  # an enum value
            raise ValueError(f"{where}: {exc}; valid sources {[s.value for s in Source]}, kinds "
                             f"{[k.value for k in CallKind]}, splits {[s.value for s in Split]}") from None


def _shape_problem(history: list[Any], tools: list[Any]) -> str | None:
    """What is wrong with the history messages or tool schemas (the prompt builders' input), or None."""
    for i, m in enumerate(history):
        at = f"history[{i}]"
        if not isinstance(m, dict):
            return f"field {at!r} must be a message object, got {type(m).__name__}"
        if m.get("role") not in ROLES:
            return f"field '{at}.role' is {m.get('role')!r:.40}, not one of {', '.join(ROLES)}"
        if m.get("content") is not None and not isinstance(m["content"], str):
            return f"field '{at}.content' must be a string or null, got {type(m['content']).__name__}"
        calls = m.get("tool_calls")
        if calls is not None and not isinstance(calls, list):
            return f"field '{at}.tool_calls' must be a list, got {type(calls).__name__}"
        for j, c in enumerate(calls or []):
            fn = c.get("function", c) if isinstance(c, dict) else None
            if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
                return f"field '{at}.tool_calls[{j}]' must be {{'function': {{'name': str, 'arguments': ...}}}}"
    for i, t in enumerate(tools):
        if not isinstance(t, dict):
            return f"field 'tools[{i}]' must be a tool object, got {type(t).__name__}"
        fn = t.get("function", t)
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            return f"field 'tools[{i}].function.name' must be a string"
    return None


def _surrogate(d: dict[str, Any]) -> str | None:
    found = text_problem(d)
    return None if found is None else f"field {found[0]!r} holds a lone surrogate (not valid Unicode text)"


def write_transitions(path: str | Path, transitions: Iterable[Transition]) -> int:
    """Write JSON Lines (key-sorted, so a rebuild of the same data is byte-identical); returns the count."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_suffix(p.suffix + ".tmp")
    n = 0
    with tmp.open("w", encoding="utf-8") as f:
        for t in transitions:
            f.write(json.dumps(t.to_dict(), sort_keys=True, ensure_ascii=False) + "\n")
            n += 1
    tmp.replace(p)  # nothing half-written is left under the real name
    return n


def iter_transitions(path: str | Path) -> Iterator[Transition]:
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(2, "worldbench transitions not found; run `envace worldbench build`", str(p))
    limit = RECORD_BYTES.value()
    with p.open("rb") as f:
        for i, raw in enumerate(f, 1):
            if len(raw) > limit:  # refused before it is decoded
                err = RECORD_BYTES.error(f"{p}:{i}", "the line is", len(raw), "split the record or shorten it")
                raise ValueError(f"{err.where}: {err.what}; {err.fix}")
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise ValueError(f"{p}:{i}: not UTF-8 (byte 0x{raw[exc.start]:02x} at column {exc.start + 1}); "
                                 f"{REBUILD}") from None
            if not line.strip():
                continue
            try:
                decoded = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{p}:{i}: not JSON ({exc.msg}); {REBUILD}") from None
            except RecursionError:
                raise ValueError(f"{p}:{i}: nested too deeply to decode; {REBUILD}") from None
            yield Transition.from_dict(decoded, f"{p}:{i}")


def read_transitions(path: str | Path) -> list[Transition]:
    return list(iter_transitions(path))
