"""Shop task shapes. Each shape adjusts the random database to meet its preconditions, then records the
gold conversation through the TaskBuilder. Replies use one fixed wording per shape ("apple: 42") so the
answer values are easy to check and to learn."""

from __future__ import annotations

import random
from typing import cast

from envace.worlds.builder import TaskBuilder
from envace.worlds.shop.db import ShopDB

LOW = 20  # restock threshold; stocks below it are "low"


def _ensure_order(db: ShopDB, rng: random.Random, customer: str) -> None:
    if db.open_order_of(customer) is None:
        oid = rng.choice(sorted(db.orders))
        db.orders[oid].customer = customer
        db.orders[oid].status = "open"


def check(b: TaskBuilder, keys: list[str], rng: random.Random) -> None:
    (item,) = keys
    b.user(f"How many {item} are in stock?")
    r = b.call("get_stock", item=item)
    b.reply(f"{item}: {r['stock']}", answers=[f"{item}: {r['stock']}"])


def receive(b: TaskBuilder, keys: list[str], rng: random.Random) -> None:
    (item,) = keys
    qty = rng.randint(2, 30)
    b.user(f"We received {qty} {item}.")
    b.call("add_stock", item=item, qty=qty)
    b.reply(f"Added {qty} {item}.")


def cancel(b: TaskBuilder, keys: list[str], rng: random.Random) -> None:
    (customer,) = keys
    _ensure_order(cast(ShopDB, b.db), rng, customer)
    b.user(f"Cancel the order of {customer}.")
    r = b.call("find_order", customer=customer)
    b.call("cancel_order", order=r["order"])
    b.reply(f"Cancelled {r['order']}.")


def pair(b: TaskBuilder, keys: list[str], rng: random.Random) -> None:
    a, c = keys
    b.user(f"How many {a} and {c} are in stock?")
    ra, rc = b.calls([("get_stock", {"item": a}), ("get_stock", {"item": c})])
    answers = [f"{a}: {ra['stock']}", f"{c}: {rc['stock']}"]
    b.reply(", ".join(answers), answers=answers)


def restock_if_low(b: TaskBuilder, keys: list[str], rng: random.Random) -> None:
    (item,) = keys
    cast(ShopDB, b.db).stock[item] = rng.randint(10, LOW - 1) if rng.random() < 0.5 else rng.randint(LOW, 99)
    qty = rng.randint(2, 30)
    b.user(f"If {item} stock is below {LOW}, add {qty} {item}.")
    r = b.call("get_stock", item=item)
    seen = f"{item}: {r['stock']}"
    if r["stock"] < LOW:
        b.call("add_stock", item=item, qty=qty)
        b.reply(f"{seen}, added {qty}.", answers=[seen])
    else:
        b.reply(f"{seen}, no change.", answers=[seen], forbid=["add_stock"])


def two_turn(b: TaskBuilder, keys: list[str], rng: random.Random) -> None:
    (customer,) = keys
    _ensure_order(cast(ShopDB, b.db), rng, customer)
    b.user(f"Find the order of {customer}.")
    r = b.call("find_order", customer=customer)
    b.reply(f"{customer}: {r['order']}", answers=[f"{customer}: {r['order']}"])
    b.user("Cancel it.")
    b.call("cancel_order", order=r["order"])
    b.reply(f"Cancelled {r['order']}.")
