"""The contract every benchmark adapter (BFCL, τ², VitaBench, FinMCP) shares.

- `BenchPolicy` (defined in `envace.engines.reply`): the model side of a benchmark,
  `reply(messages, tools) -> AssistantReply`.
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

from envace.engines.reply import BenchPolicy


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
