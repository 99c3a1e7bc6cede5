"""Shop tools. Read tools return values straight from the state; write tools echo the change without
arithmetic, so every response is copyable from the call and the state (no sums for Rehearse to do)."""

from __future__ import annotations

from typing import Any

from envace.worlds.base import ToolError, Toolkit, read_tool, write_tool
from envace.worlds.shop.db import ShopDB


class ShopTools(Toolkit):
    db: ShopDB

    def _item(self, item: str) -> str:
        if item not in self.db.stock:
            raise ToolError(f"unknown item {item!r}; known items: {sorted(self.db.stock)}")
        return item

    @read_tool
    def get_stock(self, item: str) -> dict[str, Any]:
        """Get the stock of an item.

        Args:
            item: item name
        """
        return {"item": self._item(item), "stock": self.db.stock[item]}

    @write_tool
    def add_stock(self, item: str, qty: int) -> dict[str, Any]:
        """Add units of an item to stock.

        Args:
            item: item name
            qty: units to add
        """
        self._item(item)
        if qty < 1:
            raise ToolError(f"qty must be at least 1, got {qty}")
        self.db.stock[item] += qty
        return {"ok": True, "item": item, "added": qty}

    @read_tool
    def find_order(self, customer: str) -> dict[str, Any]:
        """Find the open order of a customer.

        Args:
            customer: customer name
        """
        oid = self.db.open_order_of(customer)
        if oid is None:
            raise ToolError(f"{customer!r} has no open order")
        return {"customer": customer, "order": oid}

    @write_tool
    def cancel_order(self, order: str) -> dict[str, Any]:
        """Cancel an order.

        Args:
            order: order id
        """
        o = self.db.orders.get(order)
        if o is None:
            raise ToolError(f"unknown order {order!r}; known orders: {sorted(self.db.orders)}")
        if o.status != "open":
            raise ToolError(f"order {order!r} is already {o.status}")
        o.status = "cancelled"
        return {"ok": True, "order": order, "status": "cancelled"}
