"""Shared fixtures: a small chat-shaped corpus, its tokenizer and one tiny model dir per session (used by the model
and engine tests)."""

from __future__ import annotations

import json

import pytest
import torch

ITEMS = ["apple", "pear", "plum", "lime", "rice", "salt", "soap", "tape", "rope", "nail"]


def chat_corpus(n: int = 120) -> list[str]:
    """Chat-template-shaped lines with tool calls, JSON and numbers (deterministic)."""
    out = []
    for i in range(n):
        item, qty = ITEMS[i % len(ITEMS)], (i * 37) % 97
        call = json.dumps({"name": "add_stock", "arguments": {"item": item, "qty": qty}})
        out.append(f"<|im_start|>user\nWe received {qty} boxes of {item}, please add them.<|im_end|>\n"
                   f"<|im_start|>assistant\n<tool_call>\n{call}\n</tool_call><|im_end|>\n"
                   f"<|im_start|>user\n<tool_response>\n{{\"stock\": {qty + i}}}\n</tool_response><|im_end|>\n"
                   f"<|im_start|>assistant\nDone: {item} stock is now {qty + i}.<|im_end|>")
    return out


@pytest.fixture(scope="session")
def corpus() -> list[str]:
    return chat_corpus()


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory, corpus):
    torch.set_num_threads(1)
    from envace.models.tiny import TinyModelConfig, init_tiny_model

    return init_tiny_model(corpus, tmp_path_factory.mktemp("tiny") / "model",
                           TinyModelConfig(seed=0, extra_tokens=[], tool_format="json"))
