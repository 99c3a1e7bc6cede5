"""Shared pieces of the built-in tool world: the typed database base class, the toolkit base class
whose tool methods' docstrings *are* their OpenAI schemas, and the domain record the registry holds.

A tool is a plain method marked `@read_tool` or `@write_tool`. Its docstring's first line is the
description and its `Args:` lines (`name: text`) describe the parameters; the types come from the
signature. A tool that cannot do what was asked raises `ToolError`; the environment turns that (and any
other exception) into an error observation, as tau2-bench does, instead of ending the episode.

Departure from tau2: schemas are kept minimal (one-line descriptions, 1–3 short parameters) because the
embedded policy is a ~0.5 M-parameter model whose prompt is mostly the tools block
(reference: tiny_model_probe.md).
"""

from __future__ import annotations

import hashlib
import inspect
import json
import random
import typing
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict

from envace.toolcall import tool_schema


class ToolError(Exception):
    """A tool refused the call (unknown item, insufficient funds, ...). Becomes an error observation."""


class ToolDefinitionError(TypeError):
    """A toolkit method is marked as a tool but its docstring/signature cannot give a schema."""


class ToolKind(str, Enum):
    READ = "read"
    WRITE = "write"


_PY_TO_JSON = {str: "string", int: "integer", float: "number", bool: "boolean"}
_TOOL_ATTR = "_envace_tool_kind"


def read_tool(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Mark a toolkit method as a tool that only reads the database."""
    setattr(fn, _TOOL_ATTR, ToolKind.READ)
    return fn


def write_tool(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Mark a toolkit method as a tool that changes the database."""
    setattr(fn, _TOOL_ATTR, ToolKind.WRITE)
    return fn


def schema_from_docstring(fn: Callable[..., Any]) -> dict[str, Any]:
    """OpenAI function schema of a tool method: description = first docstring line, one property per
    parameter with its type from the annotation and its text from the `Args:` line."""
    doc = inspect.getdoc(fn) or ""
    lines = [ln.strip() for ln in doc.splitlines()]
    if not lines or not lines[0]:
        raise ToolDefinitionError(f"tool {fn.__name__!r} needs a one-line docstring description")
    arg_text: dict[str, str] = {}
    if "Args:" in lines:
        for ln in lines[lines.index("Args:") + 1:]:
            if not ln:
                break
            name, sep, text = ln.partition(":")
            if not sep:
                raise ToolDefinitionError(f"tool {fn.__name__!r}: Args line {ln!r} is not 'name: text'")
            arg_text[name.strip()] = text.strip()
    hints = typing.get_type_hints(fn)
    props: dict[str, dict[str, Any]] = {}
    required: list[str] = []
    for pname, param in inspect.signature(fn).parameters.items():
        if pname == "self":
            continue
        py_type = hints.get(pname)
        if py_type not in _PY_TO_JSON:
            raise ToolDefinitionError(f"tool {fn.__name__!r}: parameter {pname!r} needs a str/int/float/bool "
                                      f"annotation, got {py_type!r}")
        if pname not in arg_text:
            raise ToolDefinitionError(f"tool {fn.__name__!r}: parameter {pname!r} has no 'Args:' line")
        props[pname] = {"type": _PY_TO_JSON[py_type], "description": arg_text[pname]}
        if param.default is inspect.Parameter.empty:
            required.append(pname)
    extra = set(arg_text) - set(props)
    if extra:
        raise ToolDefinitionError(f"tool {fn.__name__!r}: 'Args:' documents unknown parameters {sorted(extra)}")
    return tool_schema(fn.__name__, props, required, description=lines[0])


@dataclass(frozen=True)
class ToolSpec:
    name: str
    kind: ToolKind
    schema: dict[str, Any]


class WorldDB(BaseModel):
    """Base of every domain database: validated, deep-copyable, comparable (==) and hashable by content."""

    model_config = ConfigDict(extra="forbid")

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> WorldDB:
        return cls.model_validate(data)

    def clone(self) -> WorldDB:
        return self.model_copy(deep=True)

    def digest(self) -> str:
        text = json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()

    def __hash__(self) -> int:  # content hash: equal databases hash equal
        return hash(self.digest())


class Toolkit:
    """Base of a domain's tools. Subclasses define tool methods; `specs()` is built once per class."""

    _specs: ClassVar[dict[str, ToolSpec]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        specs: dict[str, ToolSpec] = {}
        for name, member in inspect.getmembers(cls, predicate=inspect.isfunction):
            kind = getattr(member, _TOOL_ATTR, None)
            if kind is not None:
                specs[name] = ToolSpec(name, kind, schema_from_docstring(member))
        cls._specs = specs

    def __init__(self, db: WorldDB) -> None:
        self.db = db

    @classmethod
    def specs(cls) -> dict[str, ToolSpec]:
        return dict(cls._specs)

    @classmethod
    def schemas(cls) -> list[dict[str, Any]]:
        """OpenAI function schemas, in a fixed (alphabetical) order so prompts are stable."""
        return [cls._specs[n].schema for n in sorted(cls._specs)]

    @classmethod
    def write_tools(cls) -> set[str]:
        return {n for n, s in cls._specs.items() if s.kind is ToolKind.WRITE}

    def invoke(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """Run one tool. Raises ToolError for an unknown tool; a tool's own errors propagate."""
        if name not in self._specs:
            raise ToolError(f"unknown tool {name!r}; available: {sorted(self._specs)}")
        return getattr(self, name)(**arguments)


# A task shape: fills a TaskBuilder (envace.worlds.builder) given its key entities and an rng.
ShapeFn = Callable[[Any, list[str], random.Random], None]


@dataclass(frozen=True)
class Shape:
    """A task template. `vocab` names the domain vocabulary its key entities come from; `n_keys` how many
    distinct key entities it uses. (shape, key entity) pairs are what the test split holds out."""

    name: str
    vocab: str
    n_keys: int
    build: ShapeFn


@dataclass(frozen=True)
class DomainSpec:
    """Everything the generator, environment and verifier need to know about one domain."""

    name: str
    system_prompt: str
    db_cls: type[WorldDB]
    toolkit_cls: type[Toolkit]
    random_db: Callable[[random.Random], WorldDB]
    vocab: dict[str, tuple[str, ...]]
    shapes: tuple[Shape, ...]
    verifier: Any  # a StateVerifier (envace.worlds.verify)

    def shape(self, name: str) -> Shape:
        for s in self.shapes:
            if s.name == name:
                return s
        raise KeyError(f"domain {self.name!r} has no shape {name!r}; valid: {[s.name for s in self.shapes]}")
