"""The generic registry: registration rules and error messages."""

from __future__ import annotations

import pytest

from envace.algos import Registry


def _double(x):
    return 2 * x


def _triple(x):
    return 3 * x


def test_register_get_names():
    reg = Registry("toy op")
    assert reg.register("double")(_double) is _double  # the decorator returns the function unchanged
    reg.register("triple")(_triple)
    assert reg.get("double") is _double and reg.get("triple")(2) == 6
    assert reg.names() == ["double", "triple"] and "double" in reg and "half" not in reg


def test_reregistering_same_function_is_noop():
    reg = Registry("toy op")
    reg.register("double")(_double)
    reg.register("double")(_double)
    assert reg.names() == ["double"] and reg.get("double") is _double


def test_different_function_under_taken_name_raises():
    reg = Registry("toy op")
    reg.register("double")(_double)
    with pytest.raises(ValueError, match=r"toy op 'double' is already registered to .*_double.*_triple"):
        reg.register("double")(_triple)
    assert reg.get("double") is _double  # the first registration survives


def test_unknown_name_lists_valid_names():
    reg = Registry("toy op")
    reg.register("triple")(_triple)
    reg.register("double")(_double)
    with pytest.raises(ValueError, match=r"unknown toy op 'half'; valid names: double, triple"):
        reg.get("half")
    with pytest.raises(ValueError, match=r"\(none registered\)"):
        Registry("empty").get("x")


def test_bad_name_rejected():
    with pytest.raises(ValueError, match="non-empty string"):
        Registry("toy op").register("")
