"""Avg@k and pass^k (τ²-bench, arXiv 2406.12045), shared with VitaBench.

- A run succeeds when its reward is 1 (within 1e-6, as τ²-bench's `is_successful`).
- Avg@k: the mean reward over every (task, sample) pair of k samples per task (τ²'s `avg_reward`; the
  EnvACE paper reports Avg@4).
- pass^k for one task with n samples of which c succeed is C(c, k) / C(n, k): the chance that k samples
  drawn without replacement all succeed; the benchmark's pass^k is its mean over tasks.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence


def is_success(reward: float | None) -> bool:
    return reward is not None and abs(float(reward) - 1.0) <= 1e-6


def pass_hat_k(n: int, c: int, k: int) -> float:
    """C(c, k) / C(n, k) for one task with n trials and c successes."""
    if not 0 <= c <= n:
        raise ValueError(f"successes c={c} must be within 0..n={n}")
    if not 1 <= k <= n:
        raise ValueError(f"pass^k needs 1 <= k <= n trials; got k={k}, n={n}")
    return math.comb(c, k) / math.comb(n, k)


def mean_pass_hat_k(rewards_by_task: Mapping[str, Sequence[float | None]], k: int) -> float | None:
    """pass^k averaged over tasks; None when there are no tasks."""
    if not rewards_by_task:
        return None
    vals = [pass_hat_k(len(r), sum(is_success(x) for x in r), k) for r in rewards_by_task.values()]
    return sum(vals) / len(vals)


def avg_at_k(rewards_by_task: Mapping[str, Sequence[float | None]]) -> float | None:
    """Mean reward over all (task, sample) pairs (an unscored run counts 0)."""
    flat = [0.0 if r is None else float(r) for rs in rewards_by_task.values() for r in rs]
    return sum(flat) / len(flat) if flat else None


def pass_hat_ks(rewards_by_task: Mapping[str, Sequence[float | None]]) -> dict[int, float | None]:
    """pass^k for k = 1 .. the smallest number of samples of any task."""
    if not rewards_by_task:
        return {}
    k_max = min(len(r) for r in rewards_by_task.values())
    return {k: mean_pass_hat_k(rewards_by_task, k) for k in range(1, k_max + 1)}
