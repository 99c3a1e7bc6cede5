"""The contract every benchmark adapter (BFCL, τ², VitaBench, FinMCP) shares.

- `BenchPolicy` (defined in `envace.engines.reply`): the model side of a benchmark,
  `reply(messages, tools) -> AssistantReply`.
- `Benchmark`: `name` and `run(policy, *, limit, k, seed) -> BenchmarkResult`.
- `BenchmarkResult`: per-category scores, group scores, the headline number (`overall`), every departure
  from the official setup, the models used (policy / user simulator / judge), k, and per-entry records.
- `BENCHMARKS`, the registry of benchmarks by name (an `envace.registry.Registry`): built-ins are lazy entries
  (their heavy optional packages load only when that benchmark is asked for); `register_benchmark` adds more.
  Every adapter folder holds the same files (docs/extending.md, "A fifth benchmark").

Scores are fractions in [0, 1]; `report.py` prints percentages. Avg@k is the mean success over all
(entry, sample) pairs, which equals the mean over samples of each sample's accuracy.

Records are plain JSON (`jsonable`): one dict per (entry, sample) with at least `id`, `category`,
`sample`, `seed`, `valid`, `task_error` (None, or the `errors.TaskError` of a task that raised: it
scores as a failure) and, where the benchmark has a conversation, `messages` (OpenAI chat dicts).
`to_dict` / `save` write nothing but JSON types, so `json.load` reads every record back.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from enum import Enum
from pathlib import Path, PurePath
from typing import Any, Protocol, runtime_checkable

from envace.benchmarks.errors import summarize, summary_line
from envace.engines.reply import BenchPolicy
from envace.registry import Registry


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
        """Plain JSON types only (records included): `json.loads(json.dumps(r.to_dict()))` is equal to it."""
        return jsonable(asdict(self))

    def note_task_errors(self) -> dict[str, Any]:
        """Count the records' task errors by cause into `meta["task_errors"]` and, when any, add the
        summary line to the departures (the score counts them as failures). Returns the summary."""
        summary = summarize(self.records)
        self.meta["task_errors"] = summary
        line = summary_line(self.benchmark, summary)
        if summary["count"] and line not in self.departures:
            self.departures.append(line)
        return summary

    def error_summary(self) -> str:
        """One line: how many tasks errored and why."""
        return summary_line(self.benchmark, self.meta.get("task_errors") or summarize(self.records))

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> BenchmarkResult:
        data = dict(d)
        data["categories"] = {k: CategoryScore(**v) for k, v in data["categories"].items()}
        return cls(**data)

    def save(self, path: str | Path) -> Path:
        """Write the result as JSON (records included)."""
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(json.dumps(self.to_dict(), indent=1, ensure_ascii=False))
        return p

    @classmethod
    def load(cls, path: str | Path) -> BenchmarkResult:
        return cls.from_dict(json.loads(Path(path).read_text()))


def jsonable(obj: Any, *, strict: bool = False, _path: str = "$") -> Any:
    """`obj` as plain JSON data: dataclasses (via their `to_dict` when they have one), pydantic models,
    enums, paths, dates, tuples / sets and numpy scalars / arrays are converted, mapping keys become
    strings. Anything else is its `str` (strict: a TypeError naming where it sits), never a repr of a
    container, so nested results stay readable records."""
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    if isinstance(obj, Enum):
        return jsonable(obj.value, strict=strict, _path=_path)
    if isinstance(obj, Mapping):
        return {str(k): jsonable(v, strict=strict, _path=f"{_path}.{k}") for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set, frozenset)):
        items = sorted(obj, key=repr) if isinstance(obj, (set, frozenset)) else obj
        return [jsonable(v, strict=strict, _path=f"{_path}[{i}]") for i, v in enumerate(items)]
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        data = obj.to_dict() if callable(getattr(obj, "to_dict", None)) else {
            f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}
        return jsonable(data, strict=strict, _path=_path)
    if callable(getattr(obj, "model_dump", None)):  # pydantic models (τ² messages, reward info)
        return jsonable(obj.model_dump(mode="json"), strict=strict, _path=_path)
    if isinstance(obj, PurePath):
        return str(obj)
    if isinstance(obj, (dt.datetime, dt.date, dt.time)):
        return obj.isoformat()
    if callable(getattr(obj, "tolist", None)):  # numpy arrays and scalars, torch tensors
        return jsonable(obj.tolist(), strict=strict, _path=_path)
    if strict:
        raise TypeError(f"{_path}: a {type(obj).__name__} is not JSON data; convert it before recording it")
    return str(obj)


@dataclass
class GoldOutcome:
    """One benchmark's gold replay (each adapter's gold.py): how many gold answers its own checker passed."""

    benchmark: str
    passed: int
    total: int
    source: str = ""  # where the benchmark's code / data came from
    note: str = ""
    result: BenchmarkResult | None = None

    @property
    def ok(self) -> bool:
        return self.result is None or (self.total > 0 and self.passed == self.total)

    @classmethod
    def of(cls, result: BenchmarkResult, *, source: str = "", note: str = "") -> GoldOutcome:
        """Passed = the records marked valid, out of every record."""
        return cls(result.benchmark, sum(bool(r.get("valid")) for r in result.records), len(result.records),
                   source=source, note=note, result=result)


@runtime_checkable
class Benchmark(Protocol):
    name: str

    def run(self, policy: BenchPolicy, *, limit: int | None = None, k: int = 1,
            seed: int = 0) -> BenchmarkResult: ...


# The files every adapter folder holds (docs/extending.md, "A fifth benchmark"); an adapter may add its own.
ADAPTER_FILES = ("__init__.py", "benchmark.py", "data.py", "runner.py", "scoring.py", "gold.py", "transitions.py")

# Built-in adapters, imported only when asked for: each entry is a factory `(**options) -> Benchmark`, and its
# metadata names the adapter's replay tasks for worldbench (`transitions`, envace.benchmarks.transitions) and its
# gold replay (`gold`: `gold_replay(options, paths, limit, seed) -> GoldOutcome`, envace.benchmarks.gold).
BENCHMARKS: Registry[Callable[..., Benchmark]] = Registry("benchmark")
for _name, _cls in (("bfcl", "BFCLBenchmark"), ("tau2", "Tau2Benchmark"), ("vita", "VitaBenchmark"),
                    ("finmcp", "FinMCPBenchmark")):
    BENCHMARKS.add_lazy(_name, f"envace.benchmarks.{_name}.benchmark:{_cls}",
                        transitions=f"envace.benchmarks.{_name}.transitions:replay_tasks",
                        gold=f"envace.benchmarks.{_name}.gold:gold_replay")


def register_benchmark(name: str, factory: Callable[..., Benchmark] | None = None, **info: Any) -> Any:
    """Register `factory(**options) -> Benchmark` under `name` (with metadata, e.g. `transitions=
    "pkg.module:replay_tasks"`); without `factory`, a decorator. Re-registering the same factory is a no-op;
    a different one under a taken name raises."""
    if factory is None:
        return BENCHMARKS.register(name, **info)
    return BENCHMARKS.add(name, factory, **info)


def available_benchmarks() -> list[str]:
    return BENCHMARKS.names()


def get_benchmark(name: str, **options: Any) -> Benchmark:
    """Build the benchmark `name` with its options (e.g. categories=... for BFCL); an unknown name raises
    `UnknownName` (a KeyError and a ValueError) listing the valid ones."""
    return BENCHMARKS.get(name)(**options)
