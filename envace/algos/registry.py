"""A tiny name -> function registry, one per algorithm family (advantages, policy losses, KL estimators).

Every function in a family has the same signature, so callers dispatch through `get(name)` and never
special-case a name. Registering a *different* function under a taken name raises (a silent overwrite
would change an experiment without a trace); re-registering the very same function object is a no-op.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

F = TypeVar("F", bound=Callable)


def _qualified(fn: Callable) -> str:
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"


class Registry(Generic[F]):
    """Functions of one family, looked up by name.

    `family` is used only in error messages ("unknown advantage estimator 'x'; valid names: ...").
    """

    def __init__(self, family: str) -> None:
        self.family = family
        self._fns: dict[str, F] = {}

    def register(self, name: str) -> Callable[[F], F]:
        """Decorator: `@REG.register("name")` adds the function and returns it unchanged."""
        if not isinstance(name, str) or not name:
            raise ValueError(f"{self.family} name must be a non-empty string, got {name!r}")

        def decorator(fn: F) -> F:
            existing = self._fns.get(name)
            if existing is not None and existing is not fn:
                raise ValueError(
                    f"{self.family} {name!r} is already registered to {_qualified(existing)}; "
                    f"cannot register {_qualified(fn)} under the same name: pick another name"
                )
            self._fns[name] = fn
            return fn

        return decorator

    def get(self, name: str) -> F:
        """The function registered as `name`; an unknown name raises ValueError listing the valid ones."""
        try:
            return self._fns[name]
        except (KeyError, TypeError):
            raise ValueError(
                f"unknown {self.family} {name!r}; valid names: {', '.join(self.names()) or '(none registered)'}"
            ) from None

    def names(self) -> list[str]:
        """Registered names, sorted."""
        return sorted(self._fns)

    def __contains__(self, name: object) -> bool:
        return name in self._fns

    def __repr__(self) -> str:
        return f"Registry({self.family!r}, names={self.names()})"
