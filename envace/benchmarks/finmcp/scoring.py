"""FinMCP-Bench scoring, as its `eval/evaluation.py` defines it: tool NAMES only (arguments ignored).

Per sample: the tool names of every assistant tool call in the ground truth and in the prediction
(all turns, in order) are matched as multisets: TP = |pred ∩ gt|, FP = |pred − gt|, FN = |gt − pred|;
P = TP/(TP+FP), R = TP/(TP+FN), F1 = 2PR/(P+R), each 0 when its denominator is 0. Exact match
(`consist`, EMR) = the two ordered name lists are equal.
- macro P / R / F1: the mean over samples of the per-sample values;
- micro P / R / F1: from the TP / FP / FN pooled over samples;
- EMR: the mean of `consist`.
Breakdowns by L1 scenario, difficulty level and task type use the same formulas on each group.
Departure: values are not rounded to 4 decimals.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any


def tool_names(messages: Iterable[Mapping[str, Any]]) -> list[str]:
    """Names of every assistant tool call, in order."""
    return [str(c["function"]["name"]) for m in messages for c in (m.get("tool_calls") or [])
            if isinstance(c, Mapping) and isinstance(c.get("function"), Mapping)]


@dataclass(frozen=True)
class SampleCounts:
    tp: int
    fp: int
    fn: int
    exact: bool

    @classmethod
    def of(cls, pred: list[str], gold: list[str]) -> SampleCounts:
        p, g = Counter(pred), Counter(gold)
        return cls(sum((p & g).values()), sum((p - g).values()), sum((g - p).values()), pred == gold)


def _div(a: float, b: float) -> float:
    return a / b if b > 0 else 0.0


def prf(tp: int, fp: int, fn: int) -> tuple[float, float, float]:
    p, r = _div(tp, tp + fp), _div(tp, tp + fn)
    return p, r, _div(2 * p * r, p + r)


def aggregate(samples: list[SampleCounts]) -> dict[str, float]:
    """macro / micro precision, recall, F1 and the exact-match rate of a group of samples."""
    if not samples:
        return {}
    per = [prf(s.tp, s.fp, s.fn) for s in samples]
    n = len(samples)
    micro = prf(sum(s.tp for s in samples), sum(s.fp for s in samples), sum(s.fn for s in samples))
    return {"TP_macro": sum(x[0] for x in per) / n, "TR_macro": sum(x[1] for x in per) / n,
            "TF1_macro": sum(x[2] for x in per) / n, "TP_micro": micro[0], "TR_micro": micro[1],
            "TF1_micro": micro[2], "EMR": sum(s.exact for s in samples) / n, "N": float(n)}


def breakdown(samples: list[SampleCounts], keys: list[str]) -> dict[str, dict[str, float]]:
    """`aggregate` per group; keys[i] is the group of samples[i]."""
    groups: dict[str, list[SampleCounts]] = {}
    for s, k in zip(samples, keys):
        groups.setdefault(k, []).append(s)
    return {k: aggregate(v) for k, v in sorted(groups.items())}
