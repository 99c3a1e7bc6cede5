"""The one explicit registry of tool-world domains, by name (an `envace.registry.Registry` family).

Registering a second, different domain under a taken name raises; asking for an unknown name raises
`UnknownName` with the list of valid names. The three built-in domains are registered here, in one place.
"""

from __future__ import annotations

from envace.registry import Registry
from envace.worlds.base import DomainSpec

DOMAINS: Registry[DomainSpec] = Registry("tool-world domain")


def register_domain(domain: DomainSpec) -> DomainSpec:
    """Add `domain` under its own `name` (the very same spec again is a no-op)."""
    return DOMAINS.add(domain.name, domain)


def get_domain(name: str) -> DomainSpec:
    return DOMAINS.get(name)


def domain_names() -> list[str]:
    return DOMAINS.names()


def _register_builtins() -> None:
    from envace.worlds.bank import DOMAIN as BANK
    from envace.worlds.calendar import DOMAIN as CALENDAR
    from envace.worlds.shop import DOMAIN as SHOP

    for d in (SHOP, CALENDAR, BANK):
        register_domain(d)


_register_builtins()
