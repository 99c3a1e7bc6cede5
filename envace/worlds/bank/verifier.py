"""Bank verifier: the end database must equal the gold one exactly (every balance and status)."""

from __future__ import annotations

from envace.worlds.bank.db import BankDB
from envace.worlds.bank.tools import BankTools
from envace.worlds.verify import StateVerifier

VERIFIER = StateVerifier(BankDB, BankTools)
