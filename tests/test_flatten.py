"""envace.config.flatten: the one nested-dict flattener (config params, eval metrics, dashboard diff)."""

from __future__ import annotations

from pydantic import Field

from envace.config import BaseConfig, flatten


class _Inner(BaseConfig):
    t: float = Field(0.5, description="t")


class _Outer(BaseConfig):
    name: str = Field("x", description="n")
    inner: _Inner = Field(default_factory=_Inner, description="i")
    extra: dict[str, int] = Field(default_factory=dict, description="e")


def test_hand_worked_example():
    nested = {"a": {"b": 1, "c": {}}, "d": [1, {"no": "descent into lists"}], "e": {"f": {"g": None}}}
    assert flatten(nested) == {"a.b": 1, "a.c": {}, "d": [1, {"no": "descent into lists"}], "e.f.g": None}
    assert flatten(nested, sep="/") == {"a/b": 1, "a/c": {}, "d": [1, {"no": "descent into lists"}], "e/f/g": None}
    assert flatten({}) == {} and flatten({"k": {}}) == {"k": {}}  # an empty mapping is a leaf, not lost


def test_config_flat_is_flatten_of_the_dump():
    assert _Outer().flat() == {"name": "x", "inner.t": 0.5, "extra": {}}
    assert _Outer(extra={"n": 2}).flat() == {"name": "x", "inner.t": 0.5, "extra.n": 2}
