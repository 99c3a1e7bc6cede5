"""What an adapter's `transitions.py` gives worldbench: the benchmark's tasks as gold calls to replay.

Every adapter folder has a `transitions.py` whose public `replay_tasks(*, limit=None, **options) ->
list[ReplayTask]` (`limit`: the first N tasks of each of the benchmark's groups) turns the benchmark's
tasks into `ReplayTask`s: the tools offered, a
sequence of `Step`s (a conversation message, or a gold call with its requestor) and a factory of a fresh
`Executor` that executes one call in the benchmark's own environment and answers (response text, the
environment's own error flag). The adapter registers that function as its `transitions` metadata
(envace.benchmarks.base.BENCHMARKS); `envace worldbench build` records the transitions (every gold call, plus
perturbed ones) from it, with no knowledge of the adapter's internals.

A task's `split` is the benchmark's own ("train" / "test") when it has one (τ²'s split file); None leaves it
to the builder's seeded hash of the task id (its `test_fraction` of the tasks in test).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from envace.benchmarks.base import BENCHMARKS

SPLITS = ("train", "test")


class Executor(Protocol):
    def execute(self, call: dict[str, Any], requestor: str) -> tuple[str, bool]:
        """(response text, is_error) of one call, as the benchmark's environment answered it."""


@dataclass
class Step:
    message: dict[str, Any] | None = None  # a conversation message (a user turn, an assistant reply), or
    call: dict[str, Any] | None = None  # a gold call {"name", "arguments"}
    requestor: str = "assistant"  # τ² telecom: "user" for the user's device tools


@dataclass
class ReplayTask:
    domain: str  # the benchmark's own grouping (τ² domain, BFCL category, VitaBench set, ...)
    task_id: str
    tools: list[dict[str, Any]]  # OpenAI function schemas
    steps: list[Step]
    new_executor: Callable[[], Executor]  # a fresh environment for one replay
    split: str | None = None  # "train" | "test" from the benchmark itself; None: the builder's seeded hash
    opening: list[dict[str, Any]] = field(default_factory=list)  # messages before the first step
    result_schemas: dict[str, dict[str, Any]] = field(default_factory=dict)  # tool name -> declared result schema

    def __post_init__(self) -> None:
        if self.split is not None and self.split not in SPLITS:
            raise ValueError(f"task {self.task_id!r}: split {self.split!r} must be one of {SPLITS} or None")


def replay_function(benchmark: str) -> Callable[..., list[ReplayTask]]:
    """The `replay_tasks` function registered as benchmark `benchmark`'s `transitions` (imported now)."""
    target = BENCHMARKS.info(benchmark).get("transitions")
    if not isinstance(target, str) or target.count(":") != 1:
        raise ValueError(f"benchmark {benchmark!r} registers no transitions; register it with "
                         "transitions='package.module:replay_tasks' (docs/extending.md, 'A fifth benchmark')")
    module, attr = target.split(":")
    return getattr(importlib.import_module(module), attr)


def has_transitions(benchmark: str) -> bool:
    """Whether `benchmark` is registered with a `transitions` function (never imports the adapter)."""
    return benchmark in BENCHMARKS and isinstance(BENCHMARKS.info(benchmark).get("transitions"), str)
