"""Bank database: eight accounts a1..a8, one per owner, with a balance (10–99) and a status.

A frozen account can receive money but cannot send it. That rule is what makes the conditional task
("deposit into a3, or into a5 if a3 is frozen") depend on the state: a deposit into a frozen account
succeeds, so skipping the check changes the end state.
"""

from __future__ import annotations

import random
from typing import Literal

from pydantic import BaseModel, ConfigDict

from envace.worlds.base import WorldDB

OWNERS = ("ann", "bob", "cal", "dan", "eve", "fay", "gus", "hal")
ACCOUNTS = tuple(f"a{i}" for i in range(1, 9))


class Account(BaseModel):
    model_config = ConfigDict(extra="forbid")
    owner: str
    balance: int
    status: Literal["open", "frozen"] = "open"


class BankDB(WorldDB):
    accounts: dict[str, Account]

    def account_of(self, owner: str) -> str | None:
        for aid in sorted(self.accounts, key=lambda a: int(a[1:])):
            if self.accounts[aid].owner == owner:
                return aid
        return None


def random_bank(rng: random.Random) -> BankDB:
    """Owners shuffled over the accounts; about one account in four frozen."""
    owners = list(OWNERS)
    rng.shuffle(owners)
    return BankDB(accounts={
        aid: Account(owner=o, balance=rng.randint(10, 99), status="frozen" if rng.random() < 0.25 else "open")
        for aid, o in zip(ACCOUNTS, owners, strict=True)
    })
