"""Seed-level inference on hand-worked numbers, and the nested bootstrap against a slow loop over the same
draws and against its exact variance."""

from __future__ import annotations

import math

import numpy as np
import pytest

from envace.evaluation.seed_level import (
    NO_CLAIM,
    Replicate,
    holm,
    iqm,
    nested_bootstrap_means,
    nested_draws,
    probability_of_improvement,
    seed_level,
    t_test,
    verdict,
)


def _reps(diffs_by_seed, starts=None, tasks=None):
    """Replicates whose B is all zeros and whose A holds the given per-task values (one sample)."""
    starts = starts or [0] * len(diffs_by_seed)
    return [Replicate(st, i, np.asarray(d, dtype=float)[:, None], np.zeros((len(d), 1)))
            for i, (st, d) in enumerate(zip(starts, diffs_by_seed))]


def test_t_interval_and_p_on_three_values_by_hand():
    # [0.1, 0.2, 0.6]: mean 0.3; s^2 = (0.04 + 0.01 + 0.09) / 2 = 0.07, se = sqrt(0.07 / 3) = 0.1527525;
    # t(0.975, 2) = 4.3026527 -> half-width 0.6572411. t = 0.3 / 0.152753 = 1.963961; with 2 df the t CDF is
    # 1/2 + t / (2 sqrt(2 + t^2)), so p = 1 - t / sqrt(2 + t^2) = 1 - 1.963961 / 2.420153 = 0.188497.
    iv, p = t_test([0.1, 0.2, 0.6])
    assert iv.mean == pytest.approx(0.3)
    assert iv.lo == pytest.approx(0.3 - 0.6572411, abs=1e-6) and iv.hi == pytest.approx(0.3 + 0.6572411, abs=1e-6)
    assert p == pytest.approx(0.188497, abs=1e-6)
    assert math.isnan(t_test([0.5])[1])
    assert t_test([0.2, 0.2, 0.2])[1] == 0.0 and t_test([0.0, 0.0])[1] == 1.0


def test_holm_on_three_p_values_by_hand():
    # sorted 0.01, 0.03, 0.04: 3 x 0.01 = 0.03; 2 x 0.03 = 0.06; 1 x 0.04 = 0.04 -> kept monotone at 0.06
    assert holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    # a NaN is no test: m = 2 for the others (2 x 0.01, max(0.02, 1 x 0.04))
    adj = holm([0.01, math.nan, 0.04])
    assert adj[0] == pytest.approx(0.02) and math.isnan(adj[1]) and adj[2] == pytest.approx(0.04)
    assert holm([0.6, 0.9]) == pytest.approx([1.0, 1.0])


def test_iqm_of_eight_values():
    # sorted 1 2 | 3 4 5 6 | 7 100: the middle four, mean 4.5 (the 100 does not move it)
    assert iqm([7, 3, 100, 1, 5, 2, 6, 4]) == pytest.approx(4.5)
    assert iqm([0.2, 0.4, 0.9]) == pytest.approx(0.5)  # n = 3 cuts floor(3/4) = 0 from each end


def test_probability_of_improvement_two_by_three_with_a_tie():
    # A 0.5 vs B 0.4, 0.5, 0.8: 1 + 1/2 + 0; A 0.7: 1 + 1 + 0 -> 3.5 / 6
    assert probability_of_improvement([0.5, 0.7], [0.4, 0.5, 0.8]) == pytest.approx(3.5 / 6)
    assert probability_of_improvement([1.0], [1.0]) == 0.5


def test_every_number_of_a_three_seed_comparison():
    # A - B per task per seed (2 tasks): seed 0 [0.2, 0.0] -> 0.1; seed 1 [0.4, 0.0] -> 0.2; seed 2 [0.6, 0.6] -> 0.6
    reps = [Replicate(0, s, np.array(a, dtype=float), np.array(b, dtype=float)) for s, a, b in (
        (0, [[1.0, 0.2], [0.0, 0.0]], [[0.5, 0.3], [0.0, 0.0]]),     # A means [0.6, 0.0], B means [0.4, 0.0]
        (1, [[0.8, 0.8], [0.5, 0.5]], [[0.4, 0.4], [0.5, 0.5]]),     # [0.8, 0.5] vs [0.4, 0.5]
        (2, [[0.9, 0.9], [0.7, 0.7]], [[0.3, 0.3], [0.1, 0.1]]))]    # [0.9, 0.7] vs [0.3, 0.1]
    r = seed_level(reps, n_boot=4000)
    assert r.per_replicate == pytest.approx((0.1, 0.2, 0.6)) and r.diff == pytest.approx(0.3)
    assert (r.n, r.starts, r.units, r.tasks, r.k_improved) == (3, 1, 3, 2, 3)
    assert r.seed_t.lo == pytest.approx(0.3 - 0.6572411, abs=1e-6) and r.p == pytest.approx(0.188497, abs=1e-6)
    # pooled per task: [(0.2 + 0.4 + 0.6) / 3, (0 + 0 + 0.6) / 3] = [0.4, 0.2]: a bootstrap over 2 tasks spans them
    assert r.task_only.lo == pytest.approx(0.2) and r.task_only.hi == pytest.approx(0.4)
    # run scores: A [0.3, 0.65, 0.8], B [0.2, 0.45, 0.2]; IQM = mean (n = 3); PoI: 0.3 > 0.2, 0.2 and < 0.45
    assert r.iqm_a == pytest.approx(1.75 / 3) and r.iqm_b == pytest.approx(0.85 / 3)
    assert r.poi == pytest.approx(8 / 9)
    assert verdict(r, r.p) == "no difference detected, |Δ| < 0.958"  # h = 0.9572411, next 0.001 above
    assert verdict(r, 0.01) == "A > B"
    assert verdict(seed_level(reps[:2], n_boot=100), 0.0) == NO_CLAIM


def test_task_only_excludes_zero_while_seeds_disagree():
    # 30 tasks; seeds 0 and 1 gain about +0.3 on every task, seed 2 loses about 0.35: pooled per task +0.083 with
    # a small spread over tasks, so the task bootstrap excludes 0; the seeds' own means [0.3, 0.3, -0.35] do not
    rng = np.random.default_rng(3)
    per_seed = [0.3 + 0.02 * rng.standard_normal(30), 0.3 + 0.02 * rng.standard_normal(30),
                -0.35 + 0.02 * rng.standard_normal(30)]
    r = seed_level(_reps(per_seed), n_boot=4000)
    assert r.task_only.lo > 0
    assert r.seed_t.lo < 0 < r.seed_t.hi and r.seed_boot.lo < 0 < r.seed_boot.hi
    assert r.k_improved == 2 and r.p > 0.05
    assert verdict(r, holm([r.p])[0]).startswith("no difference detected")


def test_several_starts_take_the_start_means_as_units():
    # start 0: seeds at 0.1, 0.3 (mean 0.2); start 1: 0.5; start 2: 0.0, 0.2, 0.4 (mean 0.2) -> units [0.2, 0.5, 0.2]
    values = [0.1, 0.3, 0.5, 0.0, 0.2, 0.4]
    r = seed_level(_reps([[v, v] for v in values], starts=[0, 0, 1, 2, 2, 2]), n_boot=200)
    assert r.starts == 3 and r.units == 3 and r.n == 6 and r.diff == pytest.approx(0.3)
    iv, p = t_test([0.2, 0.5, 0.2])
    assert r.seed_t.lo == pytest.approx(iv.lo) and r.p == pytest.approx(p)


def _slow_means(d, starts, n_boot, rng):
    """Per bootstrap draw: for each drawn start, the mean over its drawn seeds of the mean over drawn tasks."""
    labels = list(dict.fromkeys(starts))
    rows = [[d[i] for i in range(len(d)) if starts[i] == s] for s in labels]
    sizes = [len(r) for r in rows]
    out = []
    for start, seed, task in nested_draws(rng, n_boot, sizes, d.shape[1]):
        for b in range(start.shape[0]):
            start_means = []
            for j in range(start.shape[1]):
                p = start[b, j]
                seed_means = []
                for i in range(sizes[p]):
                    row = rows[p][seed[b, j, i]]
                    seed_means.append(sum(row[t] for t in task[b, j, i]) / len(task[b, j, i]))
                start_means.append(sum(seed_means) / len(seed_means))
            out.append(sum(start_means) / len(start_means))
    return np.array(out)


@pytest.mark.parametrize("starts", [[0, 0, 0], [0, 0, 1, 2, 2]])
def test_nested_bootstrap_matches_a_slow_loop_on_the_same_draws(starts):
    d = np.random.default_rng(1).normal(size=(len(starts), 7))
    fast = nested_bootstrap_means(d, np.array(starts), 300, np.random.default_rng(11))
    slow = _slow_means(d, starts, 300, np.random.default_rng(11))
    assert fast == pytest.approx(slow, abs=1e-12)


def test_two_level_bootstrap_has_the_exact_resampling_variance():
    # one start, S seeds: each resampled seed slot is an independent draw of (a seed, then the mean of T task
    # draws of its row), so Var = (Var over seeds of the seed means + mean over seeds of row variance / T) / S
    # (population variances); the draws' spread must match it
    d = np.random.default_rng(5).normal(size=(4, 10)) + np.array([[0.0], [0.5], [1.0], [-0.5]])
    s, t = d.shape
    want = (d.mean(axis=1).var() + (d.var(axis=1) / t).mean()) / s
    means = nested_bootstrap_means(d, np.zeros(s, dtype=int), 40_000, np.random.default_rng(0))
    assert means.mean() == pytest.approx(d.mean(), abs=0.01)
    assert means.var() == pytest.approx(want, rel=0.04)


def test_mismatched_replicates_are_refused():
    with pytest.raises(ValueError, match="same held-out tasks"):
        seed_level(_reps([[0.1, 0.2], [0.1, 0.2, 0.3]]))
    with pytest.raises(ValueError, match="repeat"):
        seed_level([Replicate(0, 1, np.ones((2, 1)), np.ones((2, 1)))] * 2)
    with pytest.raises(ValueError, match="at least one replicate"):
        seed_level([])
