"""Task scripts of a benchmark source: the adapter's own replay tasks (its `transitions.py`), made scripts.

A source other than the built-in world is a registered benchmark whose `transitions` metadata names its
`replay_tasks` function (envace.benchmarks.transitions); nothing here knows an adapter's internals. The
options it is called with: the build config's fields for the built-in benchmarks (`tau2_domains`,
`bfcl_categories`, `vita_checkout`, ...), updated by `benchmark_options[<name>]` (the only options a
benchmark added later gets). A task the benchmark puts in no split goes to test with probability
`test_fraction`, by a seeded hash of (source, task id): the same split on every rebuild.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from envace.benchmarks.transitions import ReplayTask, replay_function
from envace.worldbench.config import BuildConfig
from envace.worldbench.records import Source, Split
from envace.worldbench.script import TaskScript, task_rng
from envace.worldbench.sources.world import world_scripts

# the build config's own fields for the built-in benchmarks, as their replay_tasks options
BUILTIN_OPTIONS: dict[str, Callable[[BuildConfig], dict[str, Any]]] = {
    "tau2": lambda cfg: {"domains": cfg.tau2_domains, "limit": cfg.tau2_limit},
    "bfcl": lambda cfg: {"categories": cfg.bfcl_categories, "limit": cfg.bfcl_limit},
    "vita": lambda cfg: {"checkout": cfg.vita_checkout or "", "sets": cfg.vita_sets, "language": cfg.vita_language,
                         "calls_file": cfg.vita_calls},
}


def split_of(source: str, task: ReplayTask, seed: int, test_fraction: float) -> Split:
    """The benchmark's own split, else the seeded hash of the task id."""
    if task.split is not None:
        return Split(task.split)
    return Split.TEST if task_rng(seed, f"{source}-split", task.task_id).random() < test_fraction else Split.TRAIN


def as_scripts(source: Source, tasks: list[ReplayTask], seed: int, test_fraction: float) -> list[TaskScript]:
    return [TaskScript(source=source, domain=t.domain, task_id=t.task_id,
                       split=split_of(source.value, t, seed, test_fraction), tools=t.tools, steps=t.steps,
                       new_executor=t.new_executor, opening=list(t.opening), result_schemas=dict(t.result_schemas))
            for t in tasks]


def benchmark_scripts(cfg: BuildConfig, source: Source) -> list[TaskScript]:
    """The scripts of benchmark source `source`, from its registered replay_tasks function."""
    name = source.value
    options = {**BUILTIN_OPTIONS.get(name, lambda _: {})(cfg), **cfg.benchmark_options.get(name, {})}
    return as_scripts(source, replay_function(name)(**options), cfg.seed, cfg.test_fraction)


def source_scripts(cfg: BuildConfig, source: Source) -> list[TaskScript]:
    """Every task script of one configured source."""
    if source is Source.WORLD:
        return world_scripts(cfg.world_train, cfg.world_test, cfg.seed)
    return benchmark_scripts(cfg, source)
