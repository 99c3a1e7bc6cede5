"""Shop verifier: the end database must equal the gold one exactly (stock and every order's status)."""

from __future__ import annotations

from envace.worlds.shop.db import ShopDB
from envace.worlds.shop.tools import ShopTools
from envace.worlds.verify import StateVerifier

VERIFIER = StateVerifier(ShopDB, ShopTools)
