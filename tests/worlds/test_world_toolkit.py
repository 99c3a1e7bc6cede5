"""Toolkit base: schema from docstring, read/write marking, database copy / hash semantics."""

import pytest

from envace.worlds.base import ToolDefinitionError, Toolkit, WorldDB, read_tool, write_tool
from envace.worlds.shop.db import ShopDB
from envace.worlds.shop.tools import ShopTools


def test_schema_is_built_from_signature_and_docstring():
    spec = ShopTools.specs()["add_stock"]
    assert spec.schema == {
        "type": "function",
        "function": {
            "name": "add_stock",
            "description": "Add units of an item to stock.",
            "parameters": {
                "type": "object",
                "properties": {"item": {"type": "string", "description": "item name"},
                               "qty": {"type": "integer", "description": "units to add"}},
                "required": ["item", "qty"],
            },
        },
    }
    assert ShopTools.write_tools() == {"add_stock", "cancel_order"}
    names = [s["function"]["name"] for s in ShopTools.schemas()]
    assert names == ["add_stock", "cancel_order", "find_order", "get_stock"]


def test_optional_parameter_is_not_required():
    class T(Toolkit):
        @read_tool
        def look(self, item: str, n: int = 1) -> dict:
            """Look.

            Args:
                item: thing
                n: how many
            """
            return {}

    assert T.specs()["look"].schema["function"]["parameters"]["required"] == ["item"]


def test_undocumented_parameter_is_a_definition_error():
    with pytest.raises(ToolDefinitionError, match="'qty' has no 'Args:' line"):
        class Bad(Toolkit):
            @write_tool
            def add(self, item: str, qty: int) -> dict:
                """Add.

                Args:
                    item: thing
                """
                return {}


def test_unannotated_parameter_is_a_definition_error():
    with pytest.raises(ToolDefinitionError, match="annotation"):
        class Bad(Toolkit):
            @read_tool
            def get(self, item) -> dict:  # type: ignore[no-untyped-def]
                """Get.

                Args:
                    item: thing
                """
                return {}


def test_database_clone_equality_and_hash():
    db = ShopDB(stock={"apple": 3}, orders={})
    other = db.clone()
    assert other == db and hash(other) == hash(db) and other.digest() == db.digest()
    other.stock["apple"] = 4
    assert other != db and other.digest() != db.digest()
    assert db.stock["apple"] == 3  # a deep copy: the original is untouched
    assert isinstance(db, WorldDB)
