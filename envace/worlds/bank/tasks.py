"""Bank task shapes."""

from __future__ import annotations

import random
from typing import cast

from envace.worlds.bank.db import ACCOUNTS, BankDB
from envace.worlds.builder import TaskBuilder


def _db(b: TaskBuilder) -> BankDB:
    return cast(BankDB, b.db)


def check(b: TaskBuilder, keys: list[str], rng: random.Random) -> None:
    (account,) = keys
    b.user(f"What is the balance of {account}?")
    r = b.call("get_balance", account=account)
    b.reply(f"{account}: {r['balance']}", answers=[f"{account}: {r['balance']}"])


def deposit(b: TaskBuilder, keys: list[str], rng: random.Random) -> None:
    (account,) = keys
    amount = rng.randint(2, 30)
    b.user(f"Deposit {amount} into {account}.")
    b.call("deposit", account=account, amount=amount)
    b.reply(f"Deposited {amount} into {account}.")


def owner_deposit(b: TaskBuilder, keys: list[str], rng: random.Random) -> None:
    (owner,) = keys
    amount = rng.randint(2, 30)
    b.user(f"Deposit {amount} into the account of {owner}.")
    r = b.call("find_account", owner=owner)
    b.call("deposit", account=r["account"], amount=amount)
    b.reply(f"Deposited {amount} into {r['account']}.")


def pair(b: TaskBuilder, keys: list[str], rng: random.Random) -> None:
    a, c = keys
    b.user(f"What are the balances of {a} and {c}?")
    ra, rc = b.calls([("get_balance", {"account": a}), ("get_balance", {"account": c})])
    answers = [f"{a}: {ra['balance']}", f"{c}: {rc['balance']}"]
    b.reply(", ".join(answers), answers=answers)


def deposit_unless_frozen(b: TaskBuilder, keys: list[str], rng: random.Random) -> None:
    a, c = keys
    _db(b).accounts[a].status = "frozen" if rng.random() < 0.5 else "open"
    amount = rng.randint(2, 30)
    b.user(f"Deposit {amount} into {a}, or into {c} if {a} is frozen.")
    r = b.call("get_balance", account=a)
    target = c if r["status"] == "frozen" else a
    b.call("deposit", account=target, amount=amount)
    b.reply(f"{a} is {r['status']}. Deposited {amount} into {target}.", answers=[f"{a} is {r['status']}"])


def two_turn(b: TaskBuilder, keys: list[str], rng: random.Random) -> None:
    (owner,) = keys
    src = _db(b).account_of(owner)
    assert src is not None  # every owner has an account
    _db(b).accounts[src].status = "open"
    amount = rng.randint(2, 9)  # balances start at 10, so the transfer always fits
    dst = rng.choice([x for x in ACCOUNTS if x != src])
    b.user(f"Which account is the one of {owner}?")
    r = b.call("find_account", owner=owner)
    b.reply(f"{owner}: {r['account']}", answers=[f"{owner}: {r['account']}"])
    b.user(f"Move {amount} from it to {dst}.")
    b.call("transfer", src=r["account"], dst=dst, amount=amount)
    b.reply(f"Moved {amount} from {r['account']} to {dst}.")
