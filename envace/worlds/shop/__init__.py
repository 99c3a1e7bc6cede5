"""The shop domain: products, stock and orders."""

from envace.worlds.base import DomainSpec, Shape
from envace.worlds.shop import tasks
from envace.worlds.shop.db import CUSTOMERS, ITEMS, ShopDB, random_shop
from envace.worlds.shop.tools import ShopTools
from envace.worlds.shop.verifier import VERIFIER

DOMAIN = DomainSpec(
    name="shop",
    system_prompt="You run a shop. Use the tools.",
    db_cls=ShopDB,
    toolkit_cls=ShopTools,
    random_db=random_shop,
    vocab={"item": ITEMS, "customer": CUSTOMERS},
    shapes=(
        Shape("check", "item", 1, tasks.check),
        Shape("receive", "item", 1, tasks.receive),
        Shape("cancel", "customer", 1, tasks.cancel),
        Shape("pair", "item", 2, tasks.pair),
        Shape("restock_if_low", "item", 1, tasks.restock_if_low),
        Shape("two_turn", "customer", 1, tasks.two_turn),
    ),
    verifier=VERIFIER,
)
