"""Whether a finished evaluation may exit 0, and the compact table the terminal shows.

A run fails, though every task ran, when for some benchmark
- every task run errored (`errors.FAILED_ENDINGS`: the task raised, or a prompt did not fit the context):
  no score was measured at all (endings such as user_error score 0 as the benchmark defines it and are
  named in the summary line instead);
- the judge failed (raised, or left a window's verdict unparsed) on more than `max_judge_failure_share`
  of the runs that reached it: the score is mostly the judge's failure, not the policy's.
`run_failures` returns one line per such benchmark with the causes grouped; `envace eval` prints them
after the table and exits 3 (the results are still written to eval.json and MLflow).

`summary_table` is what the terminal shows instead of the results: one row per (benchmark, headline
metric) with the value, the number of task runs and how many errored. Everything else stays in eval.json.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from envace.benchmarks.base import BenchmarkResult
from envace.benchmarks.errors import FAILED_ENDINGS, error_of, summarize, termination_of

EXIT_FAILED = 3


def _summary(r: BenchmarkResult) -> dict[str, Any]:
    summary = r.meta.get("task_errors")
    return summary if summary and "terminations" in summary else summarize(r.records)


def benchmark_failure(r: BenchmarkResult, max_judge_failure_share: float) -> str | None:
    """One line when `r` must not pass as a measured score, else None."""
    s = _summary(r)
    total = s["total"]
    endings = [termination_of(rec) for rec in r.records]
    if total and all(e in FAILED_ENDINGS for e in endings):
        causes: dict[str, int] = {}
        for rec, end in zip(r.records, endings):
            err = error_of(rec)
            key = f"ended {end}" if end != "task_error" or err is None else err.cause
            causes[key] = causes.get(key, 0) + 1
        grouped = ", ".join(f"{c} x{n}" for c, n in sorted(causes.items(), key=lambda kv: (-kv[1], kv[0])))
        example = next(iter(s["examples"].values()), "")
        return (f"{r.benchmark}: all {total} task runs failed before a score was measured: {grouped}"
                + (f" (e.g. {example})" if example else ""))
    judge = s.get("judge")
    if judge and judge["runs"] and judge["failed"] / judge["runs"] > max_judge_failure_share:
        raised = sum(n for c, n in s["by_cause"].items() if c.startswith("evaluator:"))
        return (f"{r.benchmark}: the judge failed on {judge['failed']} of {judge['runs']} judged runs "
                f"({judge['failed'] / judge['runs']:.0%} > max_judge_failure_share={max_judge_failure_share:g}): "
                f"{raised} raised, {judge['unparsed']} of {judge['windows']} windows unparsed")
    return None


def run_failures(results: Mapping[str, BenchmarkResult], max_judge_failure_share: float) -> list[str]:
    return [line for r in results.values() if (line := benchmark_failure(r, max_judge_failure_share))]


def _headline(r: BenchmarkResult) -> list[tuple[str, float | None]]:
    if r.benchmark == "finmcp":
        return [(m, r.groups.get(m)) for m in ("TF1_macro", "TP_macro", "EMR")]
    rows = [("overall (offline)" if r.benchmark == "bfcl" else "overall", r.overall)]
    rows += [(c.category, c.accuracy) for c in r.categories.values() if c.accuracy is not None]
    return rows


def summary_table(results: Mapping[str, Any]) -> str:
    """benchmark | metric | value (%) | n (task runs) | errors, for the world and every benchmark."""
    rows: list[tuple[str, str, str, str, str]] = []
    world = results.get("world")
    if world:
        n = str(int(world.get("tasks", 0)) * int(world.get("k", 1)) * len(world.get("seeds") or [0]))
        for m in ("success", "reward", "tool_call_validity"):
            if m in world:
                rows.append(("world", m, f"{100 * float(world[m]):.2f}", n, ""))
    for name, r in ((results.get("benchmarks") or {}).get("results") or {}).items():
        s = _summary(r)
        for i, (metric, value) in enumerate(_headline(r)):
            n = s["total"] if i == 0 else sum(1 for rec in r.records if rec.get("category") == metric) or ""
            errs = s["count"] if i == 0 else sum(1 for rec in r.records if rec.get("category") == metric
                                                   and rec.get("task_error"))
            rows.append((name if i == 0 else "", metric, "—" if value is None else f"{100 * value:.2f}", str(n),
                         str(errs) if n != "" else ""))
    head = ("benchmark", "metric", "value", "n", "errors")
    widths = [max(len(x[i]) for x in [head, *rows]) for i in range(5)]
    fmt = "  ".join(f"{{:<{w}}}" if i < 2 else f"{{:>{w}}}" for i, w in enumerate(widths))
    return "\n".join(line.rstrip() for line in [fmt.format(*head), *(fmt.format(*row) for row in rows)])
