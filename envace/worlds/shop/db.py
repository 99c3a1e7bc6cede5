"""Shop database: stock per item and customer orders with short ids (o1..o9).

The vocabulary is closed and tiny on purpose (10 one-token items, 8 customers): a ~0.5 M-parameter
policy can learn to copy entities it has seen, not to spell new ones (tiny_model_probe.md, probe 2).
"""

from __future__ import annotations

import random
from typing import Literal

from pydantic import BaseModel, ConfigDict

from envace.worlds.base import WorldDB

ITEMS = ("apple", "pear", "plum", "lime", "rice", "salt", "soap", "tape", "rope", "nail")
CUSTOMERS = ("ann", "bob", "cal", "dan", "eve", "fay", "gus", "hal")


class Order(BaseModel):
    model_config = ConfigDict(extra="forbid")
    customer: str
    item: str
    qty: int
    status: Literal["open", "cancelled"] = "open"


class ShopDB(WorldDB):
    stock: dict[str, int]
    orders: dict[str, Order]

    def open_order_of(self, customer: str) -> str | None:
        for oid in sorted(self.orders, key=lambda o: int(o[1:])):
            o = self.orders[oid]
            if o.customer == customer and o.status == "open":
                return oid
        return None

    def next_order_id(self) -> str:
        return f"o{len(self.orders) + 1}"


def random_shop(rng: random.Random) -> ShopDB:
    """Stock 10–99 for every item; 3–6 customers with one open order each (ids shuffled so an order
    id cannot be guessed from the customer's position)."""
    stock = {item: rng.randint(10, 99) for item in ITEMS}
    buyers = rng.sample(CUSTOMERS, rng.randint(3, 6))
    ids = [f"o{i + 1}" for i in range(len(buyers))]
    rng.shuffle(ids)
    orders = {oid: Order(customer=c, item=rng.choice(ITEMS), qty=rng.randint(1, 9))
              for oid, c in zip(ids, buyers, strict=True)}
    return ShopDB(stock=stock, orders=orders)
