"""Paired per-task comparisons of a sweep's cells, beside the seed-level table of `results`.

With 3 seeds, a Student t interval over seed means is wide (t = 4.3); the learning-signal effects here are a
few points of success. Every cell's evaluation keeps each episode's outcome (`per_task` of
`envace.evaluation.world.evaluate_world`) on the same held-out tasks, and a cell of seed s samples with seed
s, so two grid points can be compared task by task (common random numbers):
- **vs base**: each trained grid point against the baseline row (`baselines:`, no RL) of the model it started
  from — the eval cell whose model is the train cell's start model — seed by seed;
- **vs reference**: every other trained grid point against the first one (the sweep's reference level,
  `variant=envace` in paper_ablations) when both start from the same model; when they start from
  different models (model scale), their gains over their own bases are compared instead (per task,
  (other − its base) − (reference − its base)).
Each difference is the mean over the shared seeds per task, then over tasks, with a percentile bootstrap
over tasks (`envace.evaluation.paired`). The seeds are pooled: the interval says "this recipe with these
seeds on these tasks"; the seed-level table says how far seeds alone move it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from envace.evaluation.paired import TaskScores, compare, paired_bootstrap

METRICS = ("success", "reward")
COLUMNS = ["comparison", "kind", "seeds", "tasks", "samples", *[f"{m}{s}" for m in METRICS for s in
                                                                 ("_diff", "_lo", "_hi")], *METRICS]


def cell_scores(record: Mapping[str, Any]) -> TaskScores | None:
    """The per-episode outcomes of a cell's tool-world evaluation (None when its eval file has none)."""
    path = record.get("eval_file")
    if not path or not Path(path).is_file():
        return None
    world = json.loads(Path(path).read_text()).get("world") or {}
    per = world.get("per_task")
    if not per:
        return None
    return TaskScores(per["task_ids"], per["seeds"], per["k"], float(world.get("temperature", 0.0)),
                      np.array(per["success"]), np.array(per["reward"]))


def stack(scores: Sequence[TaskScores]) -> TaskScores:
    """One TaskScores holding the given seeds' columns side by side (same tasks, k and temperature)."""
    first = scores[0]
    for s in scores[1:]:
        if s.task_ids != first.task_ids or s.k != first.k or s.temperature != first.temperature:
            raise ValueError("cells evaluated on different tasks, k or temperature cannot be paired")
    return TaskScores(first.task_ids, [x for s in scores for x in s.seeds], first.k, first.temperature,
                      np.concatenate([s.success for s in scores], axis=1),
                      np.concatenate([s.reward for s in scores], axis=1))


def _model_key(path: Any) -> str:
    return str(Path(str(path)).resolve()) if path else ""


def _row(comparison: str, kind: str, seeds: Sequence[int], intervals: Mapping[str, Any], tasks: int,
         samples: int) -> dict[str, Any]:
    row: dict[str, Any] = {"comparison": comparison, "kind": kind, "seeds": ",".join(map(str, seeds)),
                           "tasks": tasks, "samples": samples}
    for m in METRICS:
        d, lo, hi = intervals[m]
        row.update({f"{m}_diff": d, f"{m}_lo": lo, f"{m}_hi": hi, m: f"{d:+.3f} [{lo:+.3f}, {hi:+.3f}]"})
    return row


def _boot(cmp: Mapping[str, Any]) -> dict[str, tuple[float, float, float]]:
    """(diff, lo, hi) of the bootstrap interval per metric of an `envace.evaluation.paired.compare` result."""
    return {m: (cmp[m]["diff"], cmp[m]["boot_lo"], cmp[m]["boot_hi"]) for m in METRICS}


def paired_report(records: Sequence[Mapping[str, Any]], *, n_boot: int = 10_000) -> pd.DataFrame:
    """The comparison table (see the module docstring); empty when no cell kept per-episode outcomes."""
    scores: dict[tuple[str, int], TaskScores] = {}
    groups: dict[str, dict[str, Any]] = {}  # group -> kind, start model, seeds in record order
    for r in records:
        s = cell_scores(r)
        if s is None:
            continue
        scores[(r["group"], int(r["seed"]))] = s
        g = groups.setdefault(r["group"], {"kind": r.get("kind"), "model": _model_key(r.get("start_model")),
                                           "seeds": []})
        g["seeds"].append(int(r["seed"]))
    bases = {g["model"]: name for name, g in groups.items() if g["kind"] == "eval" and g["model"]}
    trained = [name for name, g in groups.items() if g["kind"] == "train"]
    rows = []

    def seeds_of(*names: str) -> list[int]:
        common = set(groups[names[0]]["seeds"])
        for n in names[1:]:
            common &= set(groups[n]["seeds"])
        return sorted(common)

    def pooled(name: str, seeds: Sequence[int]) -> TaskScores:
        return stack([scores[(name, s)] for s in seeds])

    def base_of(name: str) -> str | None:
        return bases.get(groups[name]["model"])

    for name in trained:  # vs base
        base = base_of(name)
        seeds = seeds_of(name, base) if base else []
        if seeds:
            cmp = compare(pooled(base, seeds), pooled(name, seeds), n_boot=n_boot)
            rows.append(_row(f"{name} − {base}", "vs base", seeds, _boot(cmp), cmp["tasks"], cmp["samples"]))
    ref = trained[0] if trained else None
    for name in trained[1:]:  # vs reference
        if groups[name]["model"] == groups[ref]["model"]:
            seeds = seeds_of(ref, name)
            if seeds:
                cmp = compare(pooled(ref, seeds), pooled(name, seeds), n_boot=n_boot)
                rows.append(_row(f"{name} − {ref}", "vs reference", seeds, _boot(cmp), cmp["tasks"],
                                 cmp["samples"]))
            continue
        base_n, base_r = base_of(name), base_of(ref)
        seeds = seeds_of(ref, name, base_n, base_r) if base_n and base_r else []
        if not seeds:
            continue
        gains = {}
        for who, base in ((name, base_n), (ref, base_r)):
            a, b = pooled(base, seeds), pooled(who, seeds)
            if a.task_ids != b.task_ids or a.task_ids != scores[(ref, seeds[0])].task_ids:
                raise ValueError(f"{who}, {base} and {ref} were evaluated on different tasks; their gains cannot "
                                 "be paired")
            gains[who] = {m: b.metric(m) - a.metric(m) for m in METRICS}
        intervals = {}
        for m in METRICS:
            iv = paired_bootstrap(gains[ref][m], gains[name][m], n_boot=n_boot)
            intervals[m] = (iv.mean, iv.lo, iv.hi)
        n_tasks, samples = gains[ref]["success"].shape
        rows.append(_row(f"({name} − {base_n}) − ({ref} − {base_r})", "gain vs reference gain", seeds, intervals,
                         n_tasks, samples))
    return pd.DataFrame(rows, columns=COLUMNS)


def markdown_paired(table: pd.DataFrame) -> str:
    if table.empty:
        return "(no paired comparisons: no cell kept per-episode outcomes)"
    lines = ["| comparison | kind | seeds | tasks | success | reward |", "|---|---|---|---|---|---|"]
    for _, r in table.iterrows():
        lines.append(f"| {r['comparison']} | {r['kind']} | {r['seeds']} | {r['tasks']} | {r['success']} | "
                     f"{r['reward']} |")
    return "\n".join(lines)
