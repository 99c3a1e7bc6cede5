import dataclasses

import pytest

from envace.worlds import domain_names, get_domain, register_domain


def test_builtin_domains_are_registered():
    assert domain_names() == ["bank", "calendar", "shop"]
    for name in domain_names():
        d = get_domain(name)
        assert len(d.shapes) >= 4
        assert len({s.name for s in d.shapes}) == len(d.shapes)


def test_unknown_domain_lists_valid_names():
    expected = r"unknown tool-world domain 'zoo'; valid names: bank, calendar, shop$"
    with pytest.raises(ValueError, match=expected):
        get_domain("zoo")


def test_duplicate_registration_raises_but_reregistering_same_object_is_a_noop():
    shop = get_domain("shop")
    assert register_domain(shop) is shop
    with pytest.raises(ValueError, match="already registered"):
        register_domain(dataclasses.replace(shop, system_prompt="other"))
    assert get_domain("shop") is shop
