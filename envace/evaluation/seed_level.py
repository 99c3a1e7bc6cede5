"""Seed-level inference for a paired comparison of two arms: a claim about a training procedure.

A comparison is arm A against a comparator B on the same held-out tasks. Its replicates are training runs:
an RL seed, nested in an SFT start (`start`) when a sweep trains from several SFT checkpoints. Per replicate r
the paired per-task difference is d_r[t] = mean over samples of A_r[t] - mean over samples of B_r[t] (common
random numbers: both sides sample with the replicate's seed). The point estimate Δ weighs every start
equally and every seed equally within its start: Δ = mean_starts mean_seeds mean_tasks d.

Reported beside each other (95 % by default):
- **task-only**: the per-task difference pooled over the replicates with the weights of Δ, percentile
  bootstrap over tasks (`envace.evaluation.paired.paired_bootstrap`). It holds the trained models fixed:
  "these checkpoints on these tasks", nothing about a re-run of the recipe.
- **seed-t**: Student t over the top-level units (the seeds' Δ_r with one start; the start means with
  several) and its two-sided p-value (one-sample t test of mean 0). It holds the task set fixed.
- **seed-boot**: a nested percentile bootstrap: resample seeds, then tasks independently within each
  resampled seed (several starts: starts, then seeds within each resampled start, then tasks). Departure from
  the nested-design textbook case: tasks are crossed with seeds here (every seed is scored on the same
  tasks), and the independent task draw per seed lets a per-task effect shared by all seeds enter with
  weight 1/(seeds x tasks) rather than 1/tasks; the task-only interval shows that part on its own.
- "k of n improved": replicates with Δ_r > 0. IQM (interquartile mean: the mean of the middle 50 % after
  cutting floor(n/4) runs from each end, rliable's `trim_mean(x, 0.25)`) of each arm's per-run scores, and
  the probability of improvement P(A > B) over all (A run, B run) pairs, ties counting 1/2 (rliable computes
  it per task and averages; here one score per run).
- Holm's step-down adjustment over the comparisons of one table, and a verdict that never says "equal":
  "A > B" / "A < B" when the adjusted seed-level test rejects at 0.05, else "no difference detected,
  |Δ| < h" with h the larger |bound| of the seed-t interval; with fewer than 3 replicates no claim is made.
A degenerate seed-t (all units equal): zero width, p = 0 when that value is not 0 and 1 when it is.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

from envace.evaluation.paired import Interval, paired_bootstrap

ALPHA = 0.05
MIN_REPLICATES = 3  # below this a verdict makes no seed-level claim
NO_CLAIM = f"fewer than {MIN_REPLICATES} seeds: no seed-level claim"
_CHUNK = 2_000_000  # bootstrap draws gathered at once (elements), bounds the memory of one chunk


@dataclass(frozen=True)
class Replicate:
    """One training run of both arms: SFT start `start`, RL seed `seed`; outcomes [tasks, samples] on the
    same tasks (sample counts may differ between the two sides)."""
    start: int
    seed: int
    a: np.ndarray
    b: np.ndarray


@dataclass(frozen=True)
class SeedLevel:
    """One comparison's seed-level summary (see the module docstring)."""
    diff: float
    task_only: Interval
    seed_t: Interval
    p: float
    seed_boot: Interval
    k_improved: int
    n: int  # replicates
    starts: int
    tasks: int
    iqm_a: float
    iqm_b: float
    poi: float
    per_replicate: tuple[float, ...]

    @property
    def units(self) -> int:
        """The t test's units: the seeds with one start, the starts with several."""
        return self.n if self.starts == 1 else self.starts


def replicate_diffs(replicates: Sequence[Replicate]) -> tuple[np.ndarray, np.ndarray]:
    """(per-task differences [replicates, tasks], start label per replicate); raises on mismatched tasks."""
    if not replicates:
        raise ValueError("a seed-level comparison needs at least one replicate (start, seed)")
    rows = []
    for r in replicates:
        a, b = np.asarray(r.a, dtype=float), np.asarray(r.b, dtype=float)
        if a.ndim != 2 or b.ndim != 2 or a.shape[0] != b.shape[0] or a.shape[0] == 0:
            raise ValueError(f"replicate start={r.start} seed={r.seed}: outcomes must be [tasks, samples] arrays "
                             f"on the same tasks, got {a.shape} and {b.shape}")
        rows.append(a.mean(axis=1) - b.mean(axis=1))
    if len({len(x) for x in rows}) != 1:
        raise ValueError(f"replicates disagree on the number of tasks ({sorted({len(x) for x in rows})}); "
                         "evaluate every run on the same held-out tasks")
    keys = [(r.start, r.seed) for r in replicates]
    if len(set(keys)) != len(keys):
        raise ValueError(f"replicate (start, seed) pairs repeat: {keys}; one run per start and seed")
    return np.vstack(rows), np.array([r.start for r in replicates])


def _groups(starts: np.ndarray) -> list[np.ndarray]:
    return [np.flatnonzero(starts == s) for s in dict.fromkeys(starts.tolist())]


def hierarchical_mean(values: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Mean over starts of the mean over each start's replicates (axis 0 of `values`)."""
    return np.mean([values[g].mean(axis=0) for g in _groups(starts)], axis=0)


def t_test(units: Sequence[float], *, level: float = 0.95) -> tuple[Interval, float]:
    """Student t interval of the mean of `units` and the two-sided p-value of mean 0 (n - 1 df)."""
    x = np.asarray(units, dtype=float)
    m = float(x.mean())
    if len(x) < 2:
        return Interval(m, math.nan, math.nan), math.nan
    if np.ptp(x) == 0.0:  # all equal (std would be rounding noise)
        return Interval(m, m, m), 1.0 if m == 0.0 else 0.0
    se = float(x.std(ddof=1)) / math.sqrt(len(x))
    hw = float(stats.t.ppf(0.5 + level / 2, len(x) - 1)) * se
    p = float(2 * stats.t.sf(abs(m / se), len(x) - 1))
    return Interval(m, m - hw, m + hw), p


def nested_draws(rng: np.random.Generator, n_boot: int, sizes: Sequence[int], tasks: int
                 ) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """The nested bootstrap's index draws, in chunks: (start [c, P], seed [c, P, S], task [c, P, S, T]) with
    P starts, S = the most seeds of a start, T tasks. Seed slot i of a drawn start p counts only when
    i < sizes[p]; its seed index is uniform over that start's seeds."""
    sizes_arr = np.asarray(sizes)
    p, s = len(sizes_arr), int(sizes_arr.max())
    chunk = max(1, _CHUNK // (p * s * tasks))
    for lo in range(0, n_boot, chunk):
        c = min(chunk, n_boot - lo)
        start = rng.integers(0, p, size=(c, p))
        n = sizes_arr[start][..., None]
        seed = np.minimum((rng.random((c, p, s)) * n).astype(np.int64), n - 1)
        yield start, seed, rng.integers(0, tasks, size=(c, p, s, tasks))


def nested_bootstrap_means(d: np.ndarray, starts: np.ndarray, n_boot: int, rng: np.random.Generator) -> np.ndarray:
    """The n_boot bootstrap values of Δ (starts, then seeds, then tasks resampled); d [replicates, tasks]."""
    groups = _groups(starts)
    sizes = np.array([len(g) for g in groups])
    p, s, t = len(groups), int(sizes.max()), d.shape[1]
    padded = np.zeros((p, s, t))
    for i, g in enumerate(groups):
        padded[i, :len(g)] = d[g]
    slots = np.arange(s)
    out = np.empty(n_boot)
    at = 0
    for start, seed, task in nested_draws(rng, n_boot, sizes, t):
        seed_means = padded[start[..., None, None], seed[..., None], task].mean(axis=3)  # [c, P, S]
        n = sizes[start]  # [c, P]
        start_means = np.where(slots < n[..., None], seed_means, 0.0).sum(axis=2) / n
        out[at:at + len(start)] = start_means.mean(axis=1)
        at += len(start)
    return out


def nested_bootstrap(d: np.ndarray, starts: np.ndarray, *, n_boot: int = 10_000, seed: int = 0,
                     level: float = 0.95) -> Interval:
    """Percentile interval of Δ under the nested bootstrap (seeded)."""
    means = nested_bootstrap_means(d, starts, n_boot, np.random.default_rng(seed))
    a = (1 - level) / 2
    lo, hi = np.quantile(means, [a, 1 - a])
    return Interval(float(hierarchical_mean(d.mean(axis=1), starts)), float(lo), float(hi))


def iqm(scores: Sequence[float]) -> float:
    """Interquartile mean: the mean after cutting floor(n / 4) values from each end of the sorted scores."""
    x = np.sort(np.asarray(scores, dtype=float))
    if len(x) == 0:
        return math.nan
    cut = len(x) // 4
    return float(x[cut:len(x) - cut].mean())


def probability_of_improvement(a: Sequence[float], b: Sequence[float]) -> float:
    """P(A > B) over every pair (a run of A, a run of B), a tie counting 1/2."""
    x, y = np.asarray(a, dtype=float)[:, None], np.asarray(b, dtype=float)[None, :]
    if x.size == 0 or y.size == 0:
        return math.nan
    return float(((x > y) + 0.5 * (x == y)).mean())


def holm(pvalues: Sequence[float]) -> np.ndarray:
    """Holm's step-down adjusted p-values, in the input order; NaN entries are no test and stay NaN (m counts
    the finite ones)."""
    p = np.asarray(pvalues, dtype=float)
    out = np.full(p.shape, math.nan)
    idx = np.flatnonzero(np.isfinite(p))
    m = len(idx)
    running = 0.0
    for rank, i in enumerate(idx[np.argsort(p[idx], kind="stable")]):
        running = max(running, min(1.0, (m - rank) * p[i]))
        out[i] = running
    return out


def verdict(result: SeedLevel, p_holm: float, *, alpha: float = ALPHA) -> str:
    """'A > B' / 'A < B' when the Holm-adjusted seed-level test rejects, else the bound on |Δ| that the seed-t
    interval leaves: h = max(|lo|, |hi|), written as the next multiple of 0.001 above it (so "<" holds)."""
    if result.n < MIN_REPLICATES:
        return NO_CLAIM
    if math.isfinite(p_holm) and p_holm <= alpha and result.diff != 0.0:
        return "A > B" if result.diff > 0 else "A < B"
    h = max(abs(result.seed_t.lo), abs(result.seed_t.hi))
    return f"no difference detected, |Δ| < {math.floor(h * 1000 + 1) / 1000:.3f}"


def seed_level(replicates: Sequence[Replicate], *, n_boot: int = 10_000, seed: int = 0,
               level: float = 0.95) -> SeedLevel:
    """Every number of the module docstring for one comparison (A - B)."""
    d, starts = replicate_diffs(replicates)
    per_rep = d.mean(axis=1)
    groups = _groups(starts)
    units = per_rep if len(groups) == 1 else np.array([per_rep[g].mean() for g in groups])
    seed_t, p = t_test(units, level=level)
    pooled = hierarchical_mean(d, starts)
    task_only = paired_bootstrap(np.zeros_like(pooled), pooled, n_boot=n_boot, seed=seed, level=level)
    runs_a = [float(np.mean(r.a)) for r in replicates]
    runs_b = [float(np.mean(r.b)) for r in replicates]
    return SeedLevel(diff=float(np.mean(units)), task_only=task_only, seed_t=seed_t, p=p,
                     seed_boot=nested_bootstrap(d, starts, n_boot=n_boot, seed=seed, level=level),
                     k_improved=int((per_rep > 0).sum()), n=len(replicates), starts=len(groups), tasks=d.shape[1],
                     iqm_a=iqm(runs_a), iqm_b=iqm(runs_b), poi=probability_of_improvement(runs_a, runs_b),
                     per_replicate=tuple(float(x) for x in per_rep))
