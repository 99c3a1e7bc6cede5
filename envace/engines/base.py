"""The GenerationEngine protocol: batched generation returning token ids and their sampled log-probs.

Log-prob convention (shared with the trainer, so sampled and recomputed values agree): the log-prob of a
sampled token is taken from log_softmax(logits / T) over the *full* vocabulary, before top-p truncation,
where T = `logprob_temperature(temperature)`. Greedy decoding (temperature 0) records log-probs at T = 1.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

GREEDY_EPS = 1e-5


def is_greedy(temperature: float) -> bool:
    return temperature <= GREEDY_EPS


def logprob_temperature(temperature: float) -> float:
    """The temperature at which log-probs are recorded and recomputed."""
    return 1.0 if is_greedy(temperature) else float(temperature)


@dataclass
class GenRequest:
    prompt_ids: list[int]
    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 64
    stop: list[str] = field(default_factory=list)  # stop strings; the stop text is kept in the output
    seed: int | None = None  # per-request seed (derived from step, prompt, sample, role)
    # chat-level engines (envace.rollout.chat_engine: a BenchPolicy behind this protocol) read the
    # conversation instead of token ids; token engines leave these None and ignore them
    messages: list[dict[str, Any]] | None = None
    tools: list[dict[str, Any]] | None = None


@dataclass
class GenResult:
    token_ids: list[int]
    logprobs: list[float]
    text: str
    finish_reason: str = "stop"  # "stop" (eos or stop string) | "length"
    meta: dict[str, Any] = field(default_factory=dict)


@runtime_checkable
class GenerationEngine(Protocol):
    """Anything that turns prompt token ids into sampled continuations."""

    tokenizer: Any

    def generate(self, requests: list[GenRequest]) -> list[GenResult]: ...
