"""Fixtures for the whole-rollout fuzz tests: tasks of the built-in tool world (one per domain), a real
byte-level BPE tokenizer with the tiny model's chat template, and `HostileEngine`.

`HostileEngine` is a GenerationEngine test double (no model can be told to write hostile text on
demand): each request's text comes from a callable per role, returned exactly as given (lone
surrogates included, as a chat engine's JSON answer can hold them). Its token ids are placeholders
(one id per 4 characters, capped at max_new_tokens, with fake log-probs): the rollout records them but
never decodes them, and tokenising hostile text here would hide the very crash under test.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import pytest

from envace.engines.base import GenRequest, GenResult
from envace.models.tokenizer import train_tokenizer
from envace.roles.prompts import RESULT_CLOSE
from envace.types import Role, Task
from envace.worlds import domain_names, generate_tasks


def world_tasks() -> list[Task]:
    """One task per built-in domain (deterministic)."""
    return [generate_tasks(1, "train", 0, domains=[d])[0] for d in domain_names()]


class HostileEngine:
    """See the module docstring. `act(request)` / `rehearse(request)` return the text of one generation;
    `fed[role]` counts the texts handed to the rollout."""

    def __init__(self, tokenizer, act: Callable[[GenRequest], str], rehearse: Callable[[GenRequest], str]):
        self.tokenizer = tokenizer
        self.act, self.rehearse = act, rehearse
        self.fed: Counter[Role] = Counter()

    def generate(self, requests: list[GenRequest]) -> list[GenResult]:
        out = []
        for req in requests:
            role = Role.REHEARSE if RESULT_CLOSE in req.stop else Role.ACT
            text = (self.rehearse if role is Role.REHEARSE else self.act)(req)
            self.fed[role] += 1
            n = max(1, min(req.max_new_tokens, len(text) // 4 + 1))
            out.append(GenResult(token_ids=[7] * n, logprobs=[-0.5] * n, text=text,
                                 finish_reason="length" if n == req.max_new_tokens else "stop"))
        return out


def _corpus(tasks: list[Task]) -> list[str]:
    out = []
    for task in tasks * 20:
        out += [m.content for m in task.messages if m.content]
        out += ['<tool_call>\n{"name": "get_stock", "arguments": {"item": "tape"}}\n</tool_call>',
                '<execution_result>\n{"item": "tape", "stock": 3}\n</execution_result>']
    return out


@pytest.fixture(scope="session")
def fuzz_tokenizer():
    return train_tokenizer(_corpus(world_tasks()), vocab_size=400)


@pytest.fixture
def fuzz_kit():
    """The helpers above, for test modules (conftest modules must not be imported by name)."""
    from types import SimpleNamespace

    return SimpleNamespace(HostileEngine=HostileEngine, world_tasks=world_tasks)
