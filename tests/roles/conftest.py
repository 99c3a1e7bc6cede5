"""Fixtures for the role tests: a real byte-level BPE tokenizer with the tiny model's chat template
(envace.models.tokenizer.train_tokenizer), and a small task with a reference conversation."""

from __future__ import annotations

import pytest

from envace.models.tokenizer import train_tokenizer
from envace.toolcall import tool_schema
from envace.types import Message, Task, ToolCall

TOOLS = [
    tool_schema("get_stock", {"item": {"type": "string"}}, description="Units of an item in stock."),
    tool_schema("add_stock", {"item": {"type": "string"}, "qty": {"type": "integer"}},
                description="Add units of an item."),
    tool_schema("set_mode", {"mode": {"type": "string", "enum": ["fast", "safe"]}}, required=[]),
]


def _corpus() -> list[str]:
    items = ["apple", "pear", "plum", "rice", "salt", "soap", "tape", "rope"]
    out = []
    for i, item in enumerate(items * 25):
        out.append(f'<tool_call>\n{{"name": "get_stock", "arguments": {{"item": "{item}"}}}}\n</tool_call>')
        out.append(f'<execution_result>\n{{"item": "{item}", "stock": {i}}}\n</execution_result>')
        out.append(f"How many {item} are left? There are {i} units of {item} in stock.")
    return out


@pytest.fixture(scope="session")
def tokenizer():
    return train_tokenizer(_corpus(), vocab_size=400)


@pytest.fixture
def task() -> Task:
    """Two user turns; the first needs two calls answered by two tool messages."""
    return Task(
        uuid="shop-1",
        tools=TOOLS,
        messages=[
            Message("system", "You manage a shop."),
            Message("user", "How many apples and pears?"),
            Message("assistant", "", tool_calls=[ToolCall("get_stock", {"item": "apple"}),
                                                 ToolCall("get_stock", {"item": "pear"})]),
            Message("tool", '{"item": "apple", "stock": 5}', name="get_stock"),
            Message("tool", "pear stock: 7", name="get_stock"),  # not JSON: kept as a string
            Message("assistant", "5 apples and 7 pears."),
            Message("user", "Add 3 apples."),
            Message("assistant", "", tool_calls=[ToolCall("add_stock", {"item": "apple", "qty": 3})]),
            Message("tool", '{"item": "apple", "stock": 8}', name="add_stock"),
            Message("assistant", "Now 8 apples."),
        ],
    )
