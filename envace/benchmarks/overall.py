"""The Overall report of an evaluation: Overall = mean(BFCL, τ², Vita) as in the EnvACE paper, FinMCP-Bench
apart, our numbers beside the paper's (EnvACE-8B: 46.04 / 36.7 / 16.0 / 32.91; Qwen3-8B: 44.04 / 30.0 /
11.4 / 28.48), and for every benchmark the policy, user-simulator and judge models, k, limit, seed and
each departure from the official setup, plus the test-time rehearsal setting when one was used. `slots`
(set by `run_benchmarks`) records where each role's model came from (local dir, or endpoint URL + model
name and the NAME of its key variable; never the key).

The table and the headline arithmetic are report.py's (`headline_scores`, `report_table`,
`report_dict`); this module adds the record of how the numbers were produced. Scores are percentages.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from envace.benchmarks.base import BenchmarkResult
from envace.benchmarks.report import MAIN, PAPER_FINMCP, PAPER_RESULTS, headline_scores, report_dict, report_table

OVERALL_DEFINITION = ("Overall = unweighted mean of the BFCL-v4, τ²-Bench and VitaBench headline scores (shown only "
                      "when all three ran); FinMCP-Bench is reported apart")


def _by_name(results: Iterable[BenchmarkResult] | Mapping[str, BenchmarkResult]) -> dict[str, BenchmarkResult]:
    items = list(results.values() if isinstance(results, Mapping) else results)
    return {r.benchmark: r for r in items}


def overall_report(results: Iterable[BenchmarkResult] | Mapping[str, BenchmarkResult], *,
                   tts: Mapping[str, Any] | None = None, label: str = "ours") -> dict[str, Any]:
    """Everything needed to read our Overall against the paper's (JSON-safe, plus a markdown table)."""
    by = _by_name(results)
    scores = headline_scores(by)
    per = {name: {"headline": None if r.overall is None else 100.0 * r.overall,
                  "overall_definition": r.overall_definition, "models": dict(r.models), "k": r.k, "limit": r.limit,
                  "seed": r.seed, "departures": list(r.departures), "slots": r.meta.get("slots"),
                  "categories": {c.category: (None if c.accuracy is None else 100.0 * c.accuracy)
                                 for c in r.categories.values()}}
           for name, r in by.items()}
    missing = [n for n in MAIN if scores[n] is None]
    departures = [f"{name}: {d}" for name, r in by.items() for d in r.departures]
    if missing:
        departures.append(f"Overall not computed: {', '.join(missing)} did not run")
    if tts and tts.get("n", 0) > 0:
        departures.append(f"test-time rehearsal N={tts['n']} ({tts.get('mode')}): not the paper's main-table setting")
    fin = by.get("finmcp")
    markdown = report_table(by, label)
    if tts:
        markdown += f"\n\nTest-time rehearsal: {dict(tts)}"
    return {
        "overall": scores["overall"], "scores": scores, "overall_definition": OVERALL_DEFINITION,
        "paper": PAPER_RESULTS, "paper_finmcp": PAPER_FINMCP,
        "finmcp": None if fin is None else {k: (None if v is None else 100.0 * v) for k, v in fin.groups.items()},
        "models": {name: dict(r.models) for name, r in by.items()}, "k": {name: r.k for name, r in by.items()},
        "slots": {name: r.meta.get("slots") for name, r in by.items()},
        "benchmarks": per, "departures": departures, "tts": dict(tts) if tts else None,
        "report_dict": report_dict(by), "markdown": markdown,
    }
