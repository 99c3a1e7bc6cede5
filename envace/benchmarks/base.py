"""The contract every benchmark adapter (BFCL, τ², VitaBench, FinMCP) shares.

- `BenchPolicy`: the model side of a benchmark. Benchmarks talk chat messages + OpenAI tool schemas, not
  token ids: `reply(messages, tools) -> AssistantReply` (text and/or parsed tool calls). Implemented by
  `envace.engines.openai_client.OpenAIPolicy` (any OpenAI-compatible endpoint: vLLM, `envace serve`) and
  `envace.engines.chat_model.HFChatPolicy` (a local HF model dir, no HTTP). The same protocol serves a
  user simulator.
- `Benchmark`: `name` and `run(policy, *, limit, k, seed) -> BenchmarkResult`.
- `BenchmarkResult`: per-category scores, group scores, the headline number (`overall`), every departure
  from the official setup, the models used (policy / user simulator / judge), k, and per-entry records.
- A registry of benchmarks by name: built-ins are imported lazily (their heavy optional packages load only
  when that benchmark is asked for); `register_benchmark` adds more.

Scores are fractions in [0, 1]; `report.py` prints percentages. Avg@k is the mean success over all
(entry, sample) pairs, which equals the mean over samples of each sample's accuracy.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from envace.types import ErrorCode, ToolCall


@dataclass
class AssistantReply:
    """One assistant turn produced by a policy. Malformed model output is classified in `parse_error`
    (the calls are then empty and `content` holds the raw text), never raised."""

    content: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    finish_reason: str = "stop"
    usage: dict[str, int] = field(default_factory=dict)
    parse_error: ErrorCode | None = None
    detail: str = ""
    reasoning: str = ""  # reasoning text the server split off (vLLM reasoning parser / <think>)

    def to_message(self) -> dict[str, Any]:
        """The OpenAI assistant message to append to the chat history (arguments as JSON strings, every
        call with an id so tool results can refer to it)."""
        msg: dict[str, Any] = {"role": "assistant", "content": self.content}
        if self.tool_calls:
            msg["tool_calls"] = [
                {"id": c.id or f"call_{i}", "type": "function",
                 "function": {"name": c.name, "arguments": json.dumps(c.arguments, ensure_ascii=False)}}
                for i, c in enumerate(self.tool_calls)]
        return msg


@runtime_checkable
class BenchPolicy(Protocol):
    """The model under evaluation (or a user simulator): chat messages + tools in, one reply out.

    `context` says where in a benchmark the call is made (benchmark, entry id, category, sample, turn,
    step). Real policies must ignore it; scripted test policies (gold replay) use it to find their answer.
    Transport failures (server unreachable after retries) raise; bad model output does not.
    """

    name: str

    def reply(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], *, seed: int | None = None,
              context: Mapping[str, Any] | None = None) -> AssistantReply: ...


@dataclass
class CategoryScore:
    """Accuracy of one benchmark category (BFCL category, τ² domain, Vita set...)."""

    category: str
    accuracy: float | None  # None: not run (not runnable offline, or not selected)
    correct: int = 0  # successes over all (entry, sample) pairs
    total: int = 0  # entries x k
    entries: int = 0  # distinct entries evaluated
    runnable: bool = True
    note: str = ""


@dataclass
class BenchmarkResult:
    benchmark: str
    categories: dict[str, CategoryScore]
    groups: dict[str, float | None]  # group scores as the benchmark's leaderboard groups them
    overall: float | None  # the headline number, defined in `overall_definition`
    overall_definition: str
    departures: list[str]  # every way this run differs from the official setup
    models: dict[str, str | None]  # {"policy": ..., "user_simulator": ..., "judge": ...}
    k: int = 1
    limit: int | None = None
    seed: int = 0
    records: list[dict[str, Any]] = field(default_factory=list)  # one per (entry, sample)
    meta: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "BenchmarkResult":
        data = dict(d)
        data["categories"] = {k: CategoryScore(**v) for k, v in data["categories"].items()}
        return cls(**data)

    def save(self, path: str | Path) -> Path:
        """Write the result as JSON (records included)."""
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(json.dumps(self.to_dict(), indent=1, ensure_ascii=False, default=str))
        return p

    @classmethod
    def load(cls, path: str | Path) -> "BenchmarkResult":
        return cls.from_dict(json.loads(Path(path).read_text()))


@runtime_checkable
class Benchmark(Protocol):
    name: str

    def run(self, policy: BenchPolicy, *, limit: int | None = None, k: int = 1,
            seed: int = 0) -> BenchmarkResult: ...


# ----- registry -------------------------------------------------------------------------------------

# Built-in adapters, imported only when asked for ("module:attribute" of a factory returning a Benchmark).
BUILTIN_BENCHMARKS: dict[str, str] = {
    "bfcl": "envace.benchmarks.bfcl.benchmark:BFCLBenchmark",
    "tau2": "envace.benchmarks.tau2.benchmark:Tau2Benchmark",
    "vita": "envace.benchmarks.vita.benchmark:VitaBenchmark",
    "finmcp": "envace.benchmarks.finmcp.benchmark:FinMCPBenchmark",
}
_REGISTRY: dict[str, Callable[..., Benchmark]] = {}


def register_benchmark(name: str, factory: Callable[..., Benchmark]) -> Callable[..., Benchmark]:
    """Register `factory(**options) -> Benchmark` under `name`. Re-registering the same factory is a no-op;
    a different one under a taken name raises."""
    taken = _REGISTRY.get(name)
    if taken is not None and taken is not factory:
        raise ValueError(f"benchmark name {name!r} is already registered to {taken!r}; pick another name")
    _REGISTRY[name] = factory
    return factory


def available_benchmarks() -> list[str]:
    return sorted(set(_REGISTRY) | set(BUILTIN_BENCHMARKS))


def get_benchmark(name: str, **options: Any) -> Benchmark:
    """Build the benchmark `name` with its options (e.g. categories=... for BFCL)."""
    if name not in _REGISTRY and name in BUILTIN_BENCHMARKS:
        module, attr = BUILTIN_BENCHMARKS[name].split(":")
        register_benchmark(name, getattr(importlib.import_module(module), attr))
    if name not in _REGISTRY:
        raise KeyError(f"unknown benchmark {name!r}; valid names: {', '.join(available_benchmarks())}")
    return _REGISTRY[name](**options)
