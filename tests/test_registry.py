"""The one Registry: direct, decorator and lazy entries, metadata, and one error shape."""

import sys

import pytest

from envace.registry import Registry, UnknownName


def test_register_get_and_names():
    reg = Registry("toy thing")

    @reg.register("b", fast=True)
    def b():
        return 2

    reg.add("a", 1)
    assert reg.get("b") is b and reg.get("a") == 1
    assert reg.names() == ["a", "b"] and list(reg) == ["a", "b"] and len(reg) == 2
    assert "a" in reg and "c" not in reg
    assert reg.info("b") == {"fast": True} and reg.info("a") == {}


def test_unknown_name_is_one_line_naming_family_name_and_valid_names():
    reg = Registry("toy thing")
    reg.add("alpha", 1)
    reg.add("beta", 2)
    with pytest.raises(UnknownName) as err:
        reg.get("gamma")
    assert str(err.value) == "unknown toy thing 'gamma'; valid names: alpha, beta"
    # both older conventions still catch it
    with pytest.raises(KeyError):
        reg.get("gamma")
    with pytest.raises(ValueError):
        reg.info("gamma")
    assert str(Registry("empty").names()) == "[]"
    with pytest.raises(UnknownName, match=r"\(none registered\)"):
        Registry("empty").get("x")


def test_a_different_entry_under_a_taken_name_raises_the_same_one_is_a_no_op():
    reg = Registry("toy thing")
    reg.add("a", len)
    reg.add("a", len)
    with pytest.raises(ValueError, match="'a' is already registered to builtins.len"):
        reg.add("a", max)
    with pytest.raises(ValueError, match="non-empty string"):
        reg.add("", len)


def test_lazy_entry_is_imported_only_when_asked_for():
    reg = Registry("toy thing")
    sys.modules.pop("colorsys", None)
    reg.add_lazy("rgb", "colorsys:rgb_to_hsv", needs="nothing")
    assert "rgb" in reg and reg.info("rgb") == {"needs": "nothing"}
    assert "colorsys" not in sys.modules  # listing and metadata never import
    fn = reg.get("rgb")
    import colorsys

    assert fn is colorsys.rgb_to_hsv
    reg.add("rgb", colorsys.rgb_to_hsv)  # the lazy target registering itself is no conflict
    assert reg.info("rgb") == {"needs": "nothing"}
    with pytest.raises(ValueError, match="already registered"):
        reg.add_lazy("rgb", "colorsys:hsv_to_rgb")
    with pytest.raises(ValueError, match="'package.module:attribute'"):
        reg.add_lazy("bad", "colorsys.rgb_to_hsv")


def test_remove_drops_the_entry_and_its_metadata():
    reg = Registry("toy thing")
    reg.add("a", 1, note="x")
    reg.add_lazy("b", "colorsys:rgb_to_hsv")
    reg.remove("a")
    reg.remove("b")
    assert reg.names() == [] and "a" not in reg
    reg.add("a", 2)  # the name is free again, without the old metadata
    assert reg.get("a") == 2 and reg.info("a") == {}
    with pytest.raises(UnknownName, match="unknown toy thing 'zz'"):
        reg.remove("zz")
