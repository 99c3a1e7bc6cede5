"""Worldbench scores: one predicted response against the real one, and aggregates with bootstrap intervals.

Per transition (the prediction is Rehearse text, parsed by the one strict parser of the format,
envace.execution_result, so a reference row and a model are read the same way):
- `json_valid`: the parser accepted exactly one `<execution_result>` block holding a non-empty JSON
  object or array (an error object counts: it is a value to compare);
- `exact`: equal to the real value after canonicalisation (key order ignored, 1 == 1.0, true != 1:
  equal multisets of flattened leaves, envace.fidelity.leaves);
- `shape`: same keys and JSON types, recursively (envace.fidelity.shape_of; list elements as a set);
- `leaf_f1`: F1 between the multisets of flattened `path=value` leaves (envace.fidelity.field_f1);
- `real_error` / `pred_error`: the environment's own error signal / the prediction parsed to an error
  value (envace.execution_result.is_error_value); an invalid prediction predicts no error.
Aggregates (per source, per source/domain, per source/tool, per source/kind, and overall): the means of
the first four, and error precision (of predicted errors, the share that were real errors) and recall
(of real errors, the share predicted), pooled over the group; None where a denominator is 0. Intervals:
percentile bootstrap over the group's transitions (`n_boot` resamples, seeded), 95 %. `paired_gain`: the
same bootstrap for the difference of two models on the same transitions (mean over each side's seeds per
transition, then the difference, resampled over transitions), the sweep's world-model gain.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from envace.execution_result import is_error_value, parse_execution_result
from envace.fidelity import score_parsed
from envace.worldbench.records import Transition

MEANS = ("json_valid", "exact", "shape", "leaf_f1")
RATES = ("error_precision", "error_recall")


@dataclass
class TransitionScore:
    id: str
    source: str
    domain: str
    tool: str
    kind: str
    json_valid: bool
    exact: bool
    shape: bool
    leaf_f1: float
    real_error: bool
    pred_error: bool
    predicted_text: str
    predicted: Any  # the parsed prediction (None when invalid)
    real: Any  # the transition's target value
    call: dict[str, Any] | None = None  # the call that was predicted
    note: str = ""  # why there is no real prediction (prompt too long, endpoint error), "" otherwise

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def score_transition(t: Transition, predicted_text: str, note: str = "") -> TransitionScore:
    obs = parse_execution_result(predicted_text)
    valid = obs.content is not None
    s = score_parsed(valid, obs.content, t.value, None)
    return TransitionScore(id=t.id, source=t.source.value, domain=t.domain, tool=t.tool, kind=t.kind.value,
                           json_valid=s["json_valid"], exact=s["exact_match"], shape=s["schema_ok"],
                           leaf_f1=float(s["field_f1"]), real_error=t.is_error,
                           pred_error=valid and is_error_value(obs.content), predicted_text=predicted_text,
                           predicted=obs.content, real=t.value, call=t.call, note=note)


def _rate(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, num / np.maximum(den, 1), np.nan)


def _metrics(cols: dict[str, np.ndarray], idx: np.ndarray) -> dict[str, np.ndarray]:
    """Metric values for each row of `idx` (resample x transitions)."""
    out = {m: cols[m][idx].mean(axis=-1) for m in MEANS}
    real, pred = cols["real_error"][idx], cols["pred_error"][idx]
    tp = (real & pred).sum(axis=-1)
    out["error_precision"] = _rate(tp, pred.sum(axis=-1))
    out["error_recall"] = _rate(tp, real.sum(axis=-1))
    return out


def summarize(scores: list[TransitionScore], n_boot: int = 1000, seed: int = 0) -> dict[str, Any]:
    """{n, n_real_errors, n_pred_errors, <metric>: value, <metric>_ci: [lo, hi] | None} of one group."""
    n = len(scores)
    if n == 0:
        return {"n": 0}
    cols = {m: np.array([float(getattr(s, m)) for s in scores]) for m in MEANS}
    cols["real_error"] = np.array([s.real_error for s in scores], dtype=bool)
    cols["pred_error"] = np.array([s.pred_error for s in scores], dtype=bool)
    point = _metrics(cols, np.arange(n)[None, :])
    out: dict[str, Any] = {"n": n, "n_real_errors": int(cols["real_error"].sum()),
                           "n_pred_errors": int(cols["pred_error"].sum())}
    boot = None
    if n_boot > 0:
        rng = np.random.default_rng(seed)
        boot = _metrics(cols, rng.integers(0, n, size=(n_boot, n)))
    for m in MEANS + RATES:
        v = float(point[m][0])
        out[m] = None if np.isnan(v) else v
        ci = None
        if boot is not None and out[m] is not None:
            vals = boot[m][~np.isnan(boot[m])]
            if vals.size:
                ci = [float(np.percentile(vals, 2.5)), float(np.percentile(vals, 97.5))]
        out[f"{m}_ci"] = ci
    return out


def paired_gain(base: np.ndarray, other: np.ndarray, n_boot: int = 1000, seed: int = 0) -> tuple[float, float, float]:
    """(mean gain, 2.5 %, 97.5 %) of `other` over `base`, both (transitions, seeds) arrays of one per-transition
    score on the same transitions in the same order: per transition the mean over each side's seeds, the
    difference, then the percentile bootstrap over transitions (resamples as in `summarize`)."""
    base, other = np.asarray(base, dtype=float), np.asarray(other, dtype=float)
    if base.ndim != 2 or other.ndim != 2 or base.shape[0] != other.shape[0] or base.shape[0] == 0:
        raise ValueError(f"paired_gain needs (transitions, seeds) arrays over the same transitions; got "
                         f"{base.shape} and {other.shape}")
    d = other.mean(axis=1) - base.mean(axis=1)
    n = d.shape[0]
    rng = np.random.default_rng(seed)
    means = d[rng.integers(0, n, size=(n_boot, n))].mean(axis=-1)
    return float(d.mean()), float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


def aggregate(scores: Iterable[TransitionScore], n_boot: int = 1000, seed: int = 0) -> dict[str, Any]:
    """{"all": ..., "source": {s: ...}, "domain": {"s/d": ...}, "tool": {"s/t": ...}, "kind": {"s/k": ...}}."""
    scores = list(scores)
    groups: dict[str, dict[str, list[TransitionScore]]] = {"source": {}, "domain": {}, "tool": {}, "kind": {}}
    for s in scores:
        groups["source"].setdefault(s.source, []).append(s)
        groups["domain"].setdefault(f"{s.source}/{s.domain}", []).append(s)
        groups["tool"].setdefault(f"{s.source}/{s.tool}", []).append(s)
        groups["kind"].setdefault(f"{s.source}/{s.kind}", []).append(s)
    out: dict[str, Any] = {"all": summarize(scores, n_boot, seed)}
    for level, by in groups.items():
        out[level] = {k: summarize(v, n_boot, seed) for k, v in sorted(by.items())}
    return out
