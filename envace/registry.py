"""One name -> entry registry for every pluggable family (worlds, benchmarks, engines, TTS memory strategies,
training arms, advantage estimators, losses, ...).

An entry is any object (a function, a class, a factory, a spec). It is registered directly, by decorator, or
lazily as `"package.module:attribute"`, imported on first use, so a family can list an entry whose optional
dependencies (verl, vllm, a benchmark's checkout) are not installed without importing them. Each entry may
carry a small metadata mapping (`info(name)`), for facts a caller needs before loading it.

One error shape: an unknown name raises `UnknownName` (a ValueError and a KeyError, so callers of either
older convention keep working), whose one-line message names the family, the name and the valid names.
Registering a different entry under a taken name raises (a silent overwrite would change an experiment
without a trace); registering the very same entry again is a no-op.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class UnknownName(ValueError, KeyError):
    """A name that is not registered in a family."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class _Lazy:
    __slots__ = ("target",)

    def __init__(self, target: str) -> None:
        self.target = target


def _qualified(obj: Any) -> str:
    if isinstance(obj, _Lazy):
        return obj.target
    return f"{getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', repr(obj))}"


class Registry(Generic[T]):
    """Entries of one family, looked up by name. `family` is used in messages ("unknown benchmark 'x'")."""

    def __init__(self, family: str) -> None:
        self.family = family
        self._entries: dict[str, T | _Lazy] = {}
        self._info: dict[str, dict[str, Any]] = {}

    def add(self, name: str, entry: T, **info: Any) -> T:
        """Register `entry` as `name` (with optional metadata) and return it unchanged."""
        self._claim(name, entry)
        self._entries[name] = entry
        self._info[name] = dict(info) or self._info.get(name, {})
        return entry

    def register(self, name: str, **info: Any) -> Callable[[T], T]:
        """Decorator: `@REGISTRY.register("name")` adds the decorated object and returns it unchanged."""
        self._check_name(name)
        return lambda entry: self.add(name, entry, **info)

    def add_lazy(self, name: str, target: str, **info: Any) -> None:
        """Register `"package.module:attribute"`, imported the first time `get(name)` asks for it."""
        if not isinstance(target, str) or target.count(":") != 1:
            raise ValueError(f"{self.family} {name!r}: a lazy entry is 'package.module:attribute', got {target!r}")
        self._claim(name, _Lazy(target))
        if name not in self._entries:
            self._entries[name] = _Lazy(target)
            self._info[name] = dict(info)

    def get(self, name: str) -> T:
        """The entry registered as `name` (a lazy one is imported now); an unknown name raises UnknownName."""
        try:
            entry = self._entries[name]
        except (KeyError, TypeError):
            valid = ", ".join(self.names()) or "(none registered)"
            raise UnknownName(f"unknown {self.family} {name!r}; valid names: {valid}") from None
        if isinstance(entry, _Lazy):
            module, attr = entry.target.split(":")
            entry = getattr(importlib.import_module(module), attr)
            self._entries[name] = entry
        return entry

    def info(self, name: str) -> Mapping[str, Any]:
        """The metadata registered with `name` (an unknown name raises UnknownName); never imports a lazy entry."""
        if name not in self._entries:
            self.get(name)
        return dict(self._info[name])

    def remove(self, name: str) -> None:
        """Drop `name` and its metadata (a test's temporary entry); an unknown name raises UnknownName."""
        if name not in self._entries:
            self.get(name)
        del self._entries[name]
        self._info.pop(name, None)

    def names(self) -> list[str]:
        """Registered names, sorted."""
        return sorted(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"Registry({self.family!r}, names={self.names()})"

    def _check_name(self, name: str) -> None:
        if not isinstance(name, str) or not name:
            raise ValueError(f"{self.family} name must be a non-empty string, got {name!r}")

    def _claim(self, name: str, entry: Any) -> None:
        self._check_name(name)
        taken = self._entries.get(name)
        if taken is None or taken is entry:
            return
        if isinstance(taken, _Lazy) and isinstance(entry, _Lazy) and taken.target == entry.target:
            return
        if isinstance(taken, _Lazy) and not isinstance(entry, _Lazy):  # the lazy target registering itself
            module, attr = taken.target.split(":")
            if getattr(entry, "__module__", None) == module and getattr(entry, "__name__", None) == attr:
                return
        raise ValueError(f"{self.family} {name!r} is already registered to {_qualified(taken)}; cannot register "
                         f"{_qualified(entry)} under the same name: pick another name")
