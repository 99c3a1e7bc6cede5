"""Paired evaluation: compare checkpoints on the SAME held-out tasks with the SAME sampling seeds.

Every checkpoint is scored per task and per sample (a sample = one evaluation seed x one of `k`
episodes) by the real environment: success (verified end state) and the CM2 checklist reward. Two
checkpoints are then compared task by task: the per-task difference of their means is averaged over
tasks and given a 95 % interval two ways, a seeded paired bootstrap over tasks (percentile) and the
paired Student t interval. Pairing removes the between-task variance that dominates an unpaired
comparison (the rollout derives each request's seed from (seed, task position, sample, role, turn),
so both checkpoints also share their sampling randomness, common random numbers).

pass@k next to pass@1 uses the unbiased estimator 1 - C(n-c, k) / C(n, k) over a task's n samples
(Chen et al. 2021). Splits: recipes are chosen on `Split.VALIDATION` (the world's `val` split: the
training distribution, fresh tasks) and a reported number reads `Split.TEST` (unseen shape x entity
pairs) once; `held_out_tasks` fixes the task seed so every checkpoint sees the same tasks.

Departure from the paper: the paper reports Avg@k over seeds without intervals; this module adds the
paired interval because at tool-world scale the effects are of the order of the evaluation noise.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats

from envace.types import Task

TASK_SEED = 0  # the held-out task sets are fixed: generate_tasks(n, split, TASK_SEED)
METRICS = ("success", "reward")


class Split(str, Enum):
    VALIDATION = "val"
    TEST = "test"


def held_out_tasks(split: Split | str, n: int, seed: int = TASK_SEED) -> list[Task]:
    from envace.worlds.generator import generate_tasks

    return generate_tasks(n, Split(split).value, seed)


@dataclass(frozen=True)
class Interval:
    mean: float
    lo: float
    hi: float

    @property
    def half_width(self) -> float:
        return (self.hi - self.lo) / 2

    def excludes_zero(self) -> bool:
        return self.lo > 0 or self.hi < 0

    def fmt(self) -> str:
        return f"{self.mean:+.3f} [{self.lo:+.3f}, {self.hi:+.3f}]"


@dataclass
class TaskScores:
    """Per-task, per-sample scores of one checkpoint: arrays [tasks, samples] (samples: seed-major)."""
    task_ids: list[str]
    seeds: list[int]
    k: int
    temperature: float
    success: np.ndarray
    reward: np.ndarray
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.success = np.asarray(self.success, dtype=float)
        self.reward = np.asarray(self.reward, dtype=float)
        shape = (len(self.task_ids), len(self.seeds) * self.k)
        for name in METRICS:
            if getattr(self, name).shape != shape:
                raise ValueError(f"TaskScores.{name} has shape {getattr(self, name).shape}, expected {shape} "
                                 f"(tasks x seeds*k)")

    def metric(self, name: str) -> np.ndarray:
        return getattr(self, name)

    def to_json(self) -> dict[str, Any]:
        return {"task_ids": self.task_ids, "seeds": self.seeds, "k": self.k, "temperature": self.temperature,
                "success": self.success.tolist(), "reward": self.reward.tolist(),
                "meta": json.loads(json.dumps(self.meta, default=str))}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> TaskScores:
        return cls(d["task_ids"], d["seeds"], d["k"], d["temperature"], np.array(d["success"]),
                   np.array(d["reward"]), d.get("meta", {}))


def score_tasks(engine: Any, tasks: list[Task], *, seeds: list[int], temperature: float, k: int = 1,
                rollout: Any = None, with_fidelity: bool = False,
                on_trajectories: Callable[[str, int, list], None] | None = None) -> TaskScores:
    """Run `engine` (one engine, or {Role.ACT, Role.REHEARSE} engines) in the real environment and keep
    every episode's success and checklist reward by task position; `meta["summary"]` holds
    `evaluate_world`'s own result (means, per-domain scores, fidelity when `with_fidelity`).
    `on_trajectories` also gets every pass's episodes (e.g. `envace.evaluation.eval_store.world_eval_store`)."""
    from envace.evaluation.config import _eval_rollout
    from envace.evaluation.world import evaluate_world

    summary = evaluate_world(engine, tasks, rollout or _eval_rollout(), k=k, seeds=list(seeds),
                             temperature=temperature, with_fidelity=with_fidelity, on_trajectories=on_trajectories)
    per = summary.pop("per_task")  # every episode's outcome, [tasks][seeds x k] seed-major
    return TaskScores([t.uuid for t in tasks], list(seeds), k, temperature, np.array(per["success"]),
                      np.array(per["reward"]), {"summary": summary})


def paired_bootstrap(base: np.ndarray, other: np.ndarray, *, n_boot: int = 10_000, seed: int = 0,
                     level: float = 0.95) -> Interval:
    """Percentile bootstrap of mean(other - base) over tasks (resampling tasks with replacement)."""
    d = _diffs(base, other)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(d), size=(n_boot, len(d)))
    means = d[idx].mean(axis=1)
    a = (1 - level) / 2
    lo, hi = np.quantile(means, [a, 1 - a])
    return Interval(float(d.mean()), float(lo), float(hi))


def paired_t(base: np.ndarray, other: np.ndarray, *, level: float = 0.95) -> Interval:
    """Student t interval of mean(other - base) over tasks (n - 1 degrees of freedom)."""
    d = _diffs(base, other)
    m = float(d.mean())
    if len(d) < 2:
        return Interval(m, -math.inf, math.inf)
    hw = float(stats.t.ppf(0.5 + level / 2, len(d) - 1) * d.std(ddof=1) / math.sqrt(len(d)))
    return Interval(m, m - hw, m + hw)


def mean_interval(x: np.ndarray, *, level: float = 0.95) -> Interval:
    """Student t interval of a mean (e.g. over RL seeds)."""
    x = np.asarray(x, dtype=float)
    return paired_t(np.zeros_like(x), x, level=level)


def _diffs(base: np.ndarray, other: np.ndarray) -> np.ndarray:
    base, other = np.asarray(base, dtype=float), np.asarray(other, dtype=float)
    if base.shape[0] != other.shape[0]:
        raise ValueError(f"paired comparison needs the same tasks: {base.shape[0]} vs {other.shape[0]}")
    if base.shape[0] == 0:
        raise ValueError("paired comparison needs at least one task")
    mb = base.mean(axis=1) if base.ndim == 2 else base
    mo = other.mean(axis=1) if other.ndim == 2 else other
    return mo - mb


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples with c successes."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n, got n={n} c={c} k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def per_task_pass_at_k(success: np.ndarray, k: int) -> np.ndarray:
    s = np.asarray(success) > 0.5
    return np.array([pass_at_k(s.shape[1], int(row.sum()), k) for row in s])


def tasks_for_half_width(sd_diff: float, target: float = 0.01, level: float = 0.95) -> int:
    """Tasks needed so the normal-approximation half-width z * sd / sqrt(n) is <= target."""
    z = stats.norm.ppf(0.5 + level / 2)
    return max(2, math.ceil((z * sd_diff / target) ** 2))


def _check_paired(a: TaskScores, b: TaskScores) -> None:
    if a.task_ids != b.task_ids:
        first = next((i for i, (x, y) in enumerate(zip(a.task_ids, b.task_ids)) if x != y),
                     min(len(a.task_ids), len(b.task_ids)))
        raise ValueError(f"paired comparison needs the same tasks in the same order; first mismatch at position "
                         f"{first} ({len(a.task_ids)} vs {len(b.task_ids)} tasks): "
                         "evaluate both on held_out_tasks(split, n)")
    if a.seeds != b.seeds or a.k != b.k or a.temperature != b.temperature:
        raise ValueError(f"paired comparison needs the same seeds, k and temperature: "
                         f"{a.seeds}/{a.k}/T={a.temperature} vs {b.seeds}/{b.k}/T={b.temperature}")


def compare(base: TaskScores, other: TaskScores, *, n_boot: int = 10_000, seed: int = 0,
            level: float = 0.95) -> dict[str, Any]:
    """`other` - `base` per metric: means, paired bootstrap and t intervals; pass@1 and pass@n for
    success when there are n > 1 samples per task."""
    _check_paired(base, other)
    out: dict[str, Any] = {"tasks": len(base.task_ids), "samples": base.success.shape[1],
                           "temperature": base.temperature}
    cols = {m: (base.metric(m), other.metric(m)) for m in METRICS}
    n = base.success.shape[1]
    if n > 1:
        cols[f"pass@{n}"] = (per_task_pass_at_k(base.success, n), per_task_pass_at_k(other.success, n))
    for name, (x, y) in cols.items():
        boot = paired_bootstrap(x, y, n_boot=n_boot, seed=seed, level=level)
        t = paired_t(x, y, level=level)
        d = _diffs(x, y)
        out[name] = {"base": float(np.mean(x)), "other": float(np.mean(y)), "diff": boot.mean,
                     "boot_lo": boot.lo, "boot_hi": boot.hi, "t_lo": t.lo, "t_hi": t.hi,
                     "half_width": t.half_width, "sd_diff": float(d.std(ddof=1)) if len(d) > 1 else 0.0}
    return out


def load_or_score(cache: Path | None, engine_factory: Any, tasks: list[Task], *, seeds: list[int],
                  temperature: float, k: int = 1) -> TaskScores:
    """Score once per (checkpoint, tasks, seeds, T): `cache` is a JSON file written after scoring. An
    exclusive lock beside it makes concurrent processes wait for one scoring instead of repeating it."""
    if cache is None:
        return score_tasks(engine_factory(), tasks, seeds=seeds, temperature=temperature, k=k)
    import fcntl

    cache.parent.mkdir(parents=True, exist_ok=True)
    with open(cache.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if cache.is_file():
            ts = TaskScores.from_json(json.loads(cache.read_text()))
            if (ts.task_ids == [t.uuid for t in tasks] and ts.seeds == list(seeds) and ts.k == k
                    and ts.temperature == temperature):
                return ts
        ts = score_tasks(engine_factory(), tasks, seeds=seeds, temperature=temperature, k=k)
        tmp = cache.with_suffix(".tmp")
        tmp.write_text(json.dumps(ts.to_json()))
        tmp.replace(cache)
    return ts


def fmt_row(name: str, cmp: dict[str, Any], keys: tuple[str, ...] = ("success", "reward")) -> str:
    parts = [f"{k} {cmp[k]['other']:.3f} ({cmp[k]['diff']:+.3f} [{cmp[k]['boot_lo']:+.3f}, {cmp[k]['boot_hi']:+.3f}])"
             for k in keys if k in cmp]
    return f"{name:14} " + "  ".join(parts)


def engine_for(model_dir: str | Path, rehearse_dir: str | Path | None = None) -> Any:
    """The engine (`make_engine`) for a checkpoint's model; with `rehearse_dir`, the per-role pair {ACT, REHEARSE}."""
    from envace.engines.factory import make_engine
    from envace.models.loading import load_policy
    from envace.types import Role

    act = make_engine(*load_policy(Path(model_dir)))
    if rehearse_dir is None:
        return act
    return {Role.ACT: act, Role.REHEARSE: make_engine(*load_policy(Path(rehearse_dir)))}
