"""The one explicit registry of tool-world domains, by name.

Registering a second, different domain under a taken name raises; asking for an unknown name raises
with the list of valid names. The three built-in domains are registered here, in one place.
"""

from __future__ import annotations

from envace.worlds.base import DomainSpec

_DOMAINS: dict[str, DomainSpec] = {}


def register_domain(domain: DomainSpec) -> DomainSpec:
    taken = _DOMAINS.get(domain.name)
    if taken is not None and taken is not domain:
        raise ValueError(f"domain {domain.name!r} is already registered; pick another name")
    _DOMAINS[domain.name] = domain
    return domain


def get_domain(name: str) -> DomainSpec:
    if name not in _DOMAINS:
        raise ValueError(f"unknown tool-world domain {name!r}; valid domains: {sorted(_DOMAINS)}")
    return _DOMAINS[name]


def domain_names() -> list[str]:
    return sorted(_DOMAINS)


def _register_builtins() -> None:
    from envace.worlds.bank import DOMAIN as BANK
    from envace.worlds.calendar import DOMAIN as CALENDAR
    from envace.worlds.shop import DOMAIN as SHOP

    for d in (SHOP, CALENDAR, BANK):
        register_domain(d)


_register_builtins()
