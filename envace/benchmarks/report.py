"""Our benchmark results beside the EnvACE paper's main table.

Overall = mean(BFCL, τ², Vita) as in the paper (EnvACE-8B: (46.04 + 36.7 + 16.0) / 3 = 32.91); it is shown
only when all three are present. FinMCP-Bench is reported apart (the paper reports TF1 / TP for it).
Each result's headline is `BenchmarkResult.overall` (a fraction; shown x 100): the adapters define it
(BFCL: the leaderboard weights renormalised over the categories that can run offline, i.e. without web
search and memory_vector; τ²: mean of the domains' Avg@k; Vita: mean of the sets' Avg@k). The notes under
the table list the models used, k, limit, which categories ran and which did not (and why), the tasks
that errored (grouped by cause) and every departure, because none of these numbers is comparable to the
paper's without them. For BFCL the notes also give the official formula's value for the same run.

Benchmark names expected in `BenchmarkResult.benchmark`: bfcl, tau2, vita, finmcp.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from envace.benchmarks.base import BenchmarkResult

MAIN = ("bfcl", "tau2", "vita")
TITLES = {"bfcl": "BFCL-v4 Avg", "tau2": "τ²-Bench Avg", "vita": "VitaBench Avg", "overall": "Overall"}
# EnvACE paper (arXiv 2608.06197), main table; Overall = mean of the three columns.
PAPER_RESULTS: dict[str, dict[str, float]] = {
    "Qwen3-8B (paper)": {"bfcl": 44.04, "tau2": 30.0, "vita": 11.4, "overall": 28.48},
    "EnvACE-8B (paper)": {"bfcl": 46.04, "tau2": 36.7, "vita": 16.0, "overall": 32.91},
    "EnvACE-1.7B (paper)": {"bfcl": 31.81, "tau2": 15.3, "vita": 3.2, "overall": 16.77},
}
PAPER_FINMCP = {"EnvACE-8B (paper)": {"TF1": 46.78, "TP": 54.04}}


def _by_name(results: Iterable[BenchmarkResult] | Mapping[str, BenchmarkResult]) -> dict[str, BenchmarkResult]:
    items = results.values() if isinstance(results, Mapping) else results
    out: dict[str, BenchmarkResult] = {}
    for r in items:
        if r.benchmark in out:
            raise ValueError(f"two results for benchmark {r.benchmark!r}; report one run per benchmark")
        out[r.benchmark] = r
    return out


def headline_scores(results: Iterable[BenchmarkResult] | Mapping[str, BenchmarkResult]) -> dict[str, float | None]:
    """{bfcl, tau2, vita, overall} in percent (None when missing); overall needs all three."""
    by = _by_name(results)
    row: dict[str, float | None] = {}
    for name in MAIN:
        r = by.get(name)
        row[name] = None if r is None or r.overall is None else 100.0 * r.overall
    parts = [row[n] for n in MAIN]
    row["overall"] = None if any(p is None for p in parts) else sum(parts) / len(parts)  # type: ignore[arg-type]
    return row


def _fmt(v: float | None) -> str:
    return "—" if v is None else f"{v:.2f}"


def report_table(results: Iterable[BenchmarkResult] | Mapping[str, BenchmarkResult], label: str = "ours") -> str:
    """A markdown report: main table with the paper's rows, FinMCP apart, then per-benchmark notes."""
    by = _by_name(results)
    ours = headline_scores(by)
    cols = [*MAIN, "overall"]
    lines = ["| Model | " + " | ".join(TITLES[c] for c in cols) + " |", "|---" * (len(cols) + 1) + "|"]
    for model, row in PAPER_RESULTS.items():
        lines.append(f"| {model} | " + " | ".join(_fmt(row[c]) for c in cols) + " |")
    lines.append(f"| {label} | " + " | ".join(_fmt(ours[c]) for c in cols) + " |")
    if ours["overall"] is None:
        missing = [TITLES[n] for n in MAIN if ours[n] is None]
        lines.append(f"\nOverall not shown: missing {', '.join(missing)} (Overall = mean of the three).")
    if "finmcp" in by:
        fin = by["finmcp"]
        keys = sorted(k for k, v in fin.groups.items() if v is not None)
        lines += ["", "FinMCP-Bench (reported apart; paper EnvACE-8B: TF1 46.78, TP 54.04)", "",
                  "| metric | " + " | ".join(keys) + " |", "|---" * (len(keys) + 1) + "|",
                  f"| {label} | " + " | ".join(_fmt(100.0 * fin.groups[k]) for k in keys) + " |"]
    for name, r in by.items():
        lines += ["", f"### {name}: {r.overall_definition}",
                  "- models: " + ", ".join(f"{role}={model}" for role, model in r.models.items()),
                  f"- k={r.k}, limit={r.limit}, seed={r.seed}"]
        runs = [c for c in r.categories.values() if c.accuracy is not None]
        skipped = [c for c in r.categories.values() if c.accuracy is None]
        lines.append("- ran: " + ", ".join(f"{c.category} {100 * c.accuracy:.1f} ({c.entries})" for c in runs))
        unselected = [c.category for c in skipped if c.note.startswith("not selected")]
        if unselected:
            lines.append(f"- not selected (count 0 in their groups): {', '.join(unselected)}")
        lines += [f"- not run: {c.category} ({c.note})" for c in skipped if not c.note.startswith("not selected")]
        if name == "bfcl":
            lines += _bfcl_overalls(r)
        if r.meta.get("task_errors") is not None:
            lines.append(f"- task errors: {r.error_summary()}")
        lines += [f"- departure: {d}" for d in r.departures if d != r.error_summary()]
    return "\n".join(lines)


def _bfcl_overalls(r: BenchmarkResult) -> list[str]:
    """What the BFCL headline means beside the official formula's number for the same run."""
    g = r.groups
    pct = {k: (None if g.get(k) is None else 100.0 * g[k]) for k in ("overall_offline", "overall_official",
                                                                      "overall_no_agentic")}
    if pct["overall_offline"] is None:
        return []
    share = r.meta.get("offline_share")
    return [f"- headline {_fmt(pct['overall_offline'])} = the official weights renormalised over the "
            f"{'' if share is None else f'{100 * share:.1f} % '}of BFCL-v4 that runs offline (web search and "
            "memory_vector left out); not the paper's BFCL-v4 number",
            f"- official formula on this run (categories that did not run count 0): {_fmt(pct['overall_official'])};"
            f" without any agentic category (renormalised over 60 %): {_fmt(pct['overall_no_agentic'])}"]


def report_dict(results: Iterable[BenchmarkResult] | Mapping[str, BenchmarkResult]) -> dict[str, Any]:
    """Machine-readable form of the same report (for MLflow / the dashboard)."""
    by = _by_name(results)
    return {"ours": headline_scores(by), "paper": PAPER_RESULTS, "paper_finmcp": PAPER_FINMCP,
            "benchmarks": {n: {"overall": r.overall, "overall_definition": r.overall_definition, "groups": r.groups,
                               "models": r.models, "k": r.k, "limit": r.limit, "departures": r.departures,
                               "categories_run": [c.category for c in r.categories.values() if c.accuracy is not None],
                               "categories_not_run": {c.category: c.note for c in r.categories.values()
                                                      if c.accuracy is None},
                               "task_errors": r.meta.get("task_errors")} for n, r in by.items()}}
