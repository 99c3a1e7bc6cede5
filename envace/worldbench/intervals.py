"""Intervals of the behaviour metrics: one value per (unit, seed), units being transitions or tasks.

`interval_summary(values)` takes a [units, seeds] array (a column per sampling seed; one column when the
metric has no sampling) and reports the mean with, at 95 %:
- `ci`: the percentile bootstrap over units of the per-unit mean over seeds
  (envace.evaluation.paired.paired_bootstrap against zero: "these predictions on these transitions");
- with two or more seeds, `seed_t` (Student t over the per-seed means, envace.evaluation.seed_level.t_test)
  and `seed_boot` (the nested bootstrap, seeds then units, envace.evaluation.seed_level.nested_bootstrap with
  one start): what a re-run with other sampling seeds would give.
NaN entries (a unit a seed could not score) are refused: the callers leave such units out and count them,
so an interval never silently averages over fewer units than it names.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from envace.evaluation.paired import paired_bootstrap
from envace.evaluation.seed_level import nested_bootstrap, t_test


def interval_summary(values: Any, n_boot: int = 1000, seed: int = 0) -> dict[str, Any]:
    """{n, seeds, mean, ci, per_seed, seed_t?, seed_boot?} of a [units, seeds] array (see the docstring)."""
    x = np.asarray(values, dtype=float)
    if x.ndim == 1:
        x = x[:, None]
    if x.ndim != 2:
        raise ValueError(f"interval_summary needs a [units, seeds] array, got shape {x.shape}")
    if np.isnan(x).any():
        raise ValueError("interval_summary got NaN values; leave unscorable units out and count them instead")
    n, k = x.shape
    if n == 0:
        return {"n": 0, "seeds": k, "mean": None, "ci": None, "per_seed": []}
    per_unit = x.mean(axis=1)
    out: dict[str, Any] = {"n": n, "seeds": k, "mean": float(per_unit.mean()), "ci": None,
                           "per_seed": [float(v) for v in x.mean(axis=0)]}
    if n_boot > 0:
        iv = paired_bootstrap(np.zeros(n), per_unit, n_boot=n_boot, seed=seed)
        out["ci"] = [iv.lo, iv.hi]
    if k >= 2:
        st, p = t_test(x.mean(axis=0))
        out["seed_t"] = [st.lo, st.hi]
        out["seed_t_p"] = p
        if n_boot > 0:
            nb = nested_bootstrap(x.T, np.zeros(k, dtype=int), n_boot=n_boot, seed=seed)
            out["seed_boot"] = [nb.lo, nb.hi]
    return out


def flat_metrics(prefix: str, summary: dict[str, Any]) -> dict[str, float]:
    """MLflow metrics of one summary: `<prefix>` (the mean), `<prefix>_lo` / `_hi` (the bootstrap interval),
    `<prefix>_seed_lo` / `_seed_hi` (the seed-level t interval, when there is one) and `<prefix>_n`."""
    out: dict[str, float] = {f"{prefix}_n": float(summary.get("n") or 0)}
    if summary.get("mean") is not None:
        out[prefix] = float(summary["mean"])
    if summary.get("ci"):
        out[f"{prefix}_lo"], out[f"{prefix}_hi"] = (float(v) for v in summary["ci"])
    if summary.get("seed_t"):
        out[f"{prefix}_seed_lo"], out[f"{prefix}_seed_hi"] = (float(v) for v in summary["seed_t"])
    return out
