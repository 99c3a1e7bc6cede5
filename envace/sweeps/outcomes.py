"""A sweep's outcomes in compact files, and its report recomputed from them alone (no training, no models).

The sweep flow keeps its cell records beside the results (`<out_dir>/results/records.json`, `write_records`).
`export_outcomes(out_dir, dest)` turns them and the cells' evaluation files into:
- `outcomes.csv.gz`: one row per cell x evaluation pass x task x sample: group, kind, start_model, sft_seed,
  seed, pass, temperature, k, task_pos, task_id, sample, eval_seed, episode, success, reward (gzip without a
  timestamp, so an unchanged export is byte-identical and can be committed);
- `cells.csv`: one row per finished cell: the axis levels, group, seed, cell, mlflow_run_id, kind, sft_seed,
  start_model, then every metric the cell logged;
- `contrasts.csv` (only when the sweep names contrasts): arm, comparator.
`analyze(dest)` rebuilds every cell's per-episode outcomes from those files and recomputes the mean ± 95 % CI
table (the default sweep metrics present in cells.csv) and the seed-level paired table
(`envace.sweeps.paired_report.paired_table`), writing `report.md` and `paired.csv` into `dest`; when cells.csv
holds worldbench metrics, the report ends with the seed-level fidelity section (`envace.sweeps.fidelity_seeds`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from envace.evaluation.paired import TaskScores
from envace.sweeps.fidelity_seeds import fidelity_report
from envace.sweeps.paired_report import Cell, load_cells, markdown_paired, model_key, paired_table
from envace.sweeps.results import cells_frame, markdown_table, summarize

RECORDS_FILE = "records.json"
OUTCOMES = "outcomes.csv.gz"
CELLS = "cells.csv"
CONTRASTS = "contrasts.csv"
OUTCOME_COLUMNS = ["group", "kind", "start_model", "sft_seed", "seed", "pass", "temperature", "k", "task_pos",
                   "task_id", "sample", "eval_seed", "episode", "success", "reward"]
CELL_KEYS = ["group", "kind", "start_model", "sft_seed", "seed"]
REPORT_METRICS = ("eval/world/success", "eval/world/reward", "train/reward_last")  # the sweeps' default metrics
_GZIP = {"method": "gzip", "mtime": 0}


def write_records(results_dir: str | Path, records: Sequence[Mapping[str, Any]], *, out_dir: str | Path,
                  contrasts: Iterable[Sequence[str]] = ()) -> Path:
    """`<results_dir>/records.json`: the sweep's cell records, its out_dir (to re-root moved files) and
    contrasts."""
    path = Path(results_dir) / RECORDS_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"out_dir": str(out_dir), "contrasts": [list(c) for c in contrasts],
                                "records": list(records)}, indent=1, default=str))
    return path


def _rerooted(path: Any, old: Path, new: Path) -> Any:
    """A recorded file path, moved with the sweep folder when it no longer exists where it was written."""
    if not path or Path(path).exists():
        return path
    try:
        return str(new / Path(path).relative_to(old))
    except ValueError:
        return path


def read_records(sweep_dir: str | Path) -> tuple[list[dict[str, Any]], list[list[str]]]:
    """(records, contrasts) of a finished sweep, eval file paths re-rooted at `sweep_dir`."""
    sweep_dir = Path(sweep_dir)
    path = sweep_dir / "results" / RECORDS_FILE
    if not path.is_file():
        raise ValueError(f"{path} not found: `envace sweep run CONFIG` writes it when a sweep finishes; run the "
                         "sweep again (finished cells are cached) or pass the sweep's out_dir")
    state = json.loads(path.read_text())
    old = Path(state.get("out_dir") or sweep_dir)
    records = []
    for r in state["records"]:
        r = dict(r)
        r["eval_file"] = _rerooted(r.get("eval_file"), old, sweep_dir)
        if r.get("eval_files"):
            r["eval_files"] = {k: _rerooted(v, old, sweep_dir) for k, v in r["eval_files"].items()}
        records.append(r)
    return records, [list(c) for c in state.get("contrasts") or []]


def outcomes_frame(cells: Sequence[Cell]) -> pd.DataFrame:
    """The long outcome table of `cells` (module docstring), one row per cell x pass x task x sample."""
    parts = []
    for c in cells:
        for name, s in c.passes.items():
            t, n = s.success.shape
            sample = np.tile(np.arange(n), t)
            parts.append(pd.DataFrame({
                "group": c.group, "kind": c.kind, "start_model": c.model, "sft_seed": c.start, "seed": c.seed,
                "pass": name, "temperature": s.temperature, "k": s.k, "task_pos": np.repeat(np.arange(t), n),
                "task_id": np.repeat(np.asarray(s.task_ids, dtype=object), n), "sample": sample,
                "eval_seed": np.asarray(s.seeds)[sample // s.k], "episode": sample % s.k,
                "success": s.success.ravel(), "reward": s.reward.ravel()}))
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=OUTCOME_COLUMNS)


def export_outcomes(sweep_dir: str | Path, dest: str | Path) -> dict[str, Path]:
    """outcomes.csv.gz, cells.csv (and contrasts.csv) of the sweep in `sweep_dir`, written under `dest`."""
    records, contrasts = read_records(sweep_dir)
    cells = load_cells(records)
    if not cells:
        raise ValueError(f"{Path(sweep_dir) / 'results' / RECORDS_FILE}: no cell kept per-episode outcomes "
                         "(world.per_task in its eval file); nothing to export")
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    paths = {OUTCOMES: dest / OUTCOMES, CELLS: dest / CELLS}
    outcomes = outcomes_frame(cells)
    # the model as the sweep's records name it (relative to where the sweep ran), not this machine's absolute path
    named = {model_key(r.get("start_model")): str(r.get("start_model") or "") for r in reversed(records)}
    outcomes["start_model"] = outcomes["start_model"].map(lambda m: named.get(m, m))
    outcomes.to_csv(paths[OUTCOMES], index=False, compression=_GZIP)
    axes = list(dict.fromkeys(a for r in records for a in r.get("levels", {})))
    frame = cells_frame(records, axes)
    at = frame.columns.get_loc("mlflow_run_id") + 1
    for i, (col, values) in enumerate((("kind", [r.get("kind") for r in records]),
                                       ("sft_seed", [r.get("sft_seed", 0) for r in records]),
                                       ("start_model", [r.get("start_model") for r in records]))):
        frame.insert(at + i, col, values)
    frame.to_csv(paths[CELLS], index=False)
    if contrasts:
        paths[CONTRASTS] = dest / CONTRASTS
        pd.DataFrame(contrasts, columns=["arm", "comparator"]).to_csv(paths[CONTRASTS], index=False)
    return paths


def _need(df: pd.DataFrame, cols: Sequence[str], path: Path) -> None:
    missing = [c for c in cols if c not in df.columns]
    if missing:
        raise ValueError(f"{path}: column(s) {missing} missing; write it with `envace sweep export SWEEP_OUT_DIR "
                         f"{path.parent}`")


def cells_from_outcomes(path: str | Path) -> list[Cell]:
    """The cells of an outcomes.csv.gz, each pass's outcomes back as TaskScores [tasks, samples]."""
    path = Path(path)
    df = pd.read_csv(path, float_precision="round_trip", dtype={"task_id": str, "group": str, "pass": str,
                                                                 "start_model": str, "kind": str})
    _need(df, OUTCOME_COLUMNS, path)
    df["start_model"] = df["start_model"].fillna("")
    cells: dict[tuple, Cell] = {}
    for key, part in df.groupby(CELL_KEYS + ["pass"], sort=False):
        group, kind, model, start, seed, name = key
        part = part.sort_values(["task_pos", "sample"])
        t, n = part["task_pos"].nunique(), int(part["sample"].max()) + 1
        k = int(part["k"].iloc[0])
        if len(part) != t * n or not np.array_equal(part["sample"].to_numpy(), np.tile(np.arange(n), t)) or n % k:
            raise ValueError(f"{path}: {group} (SFT start {start}, seed {seed}, pass {name}) does not hold every "
                             f"sample of every task; export the sweep again")
        first = part.iloc[::n]
        c = cells.setdefault((group, kind, model, start, seed), Cell(f"{group},sft={start},seed={seed}", group, kind,
                                                                   int(start), int(seed), model))
        c.passes[name] = TaskScores(first["task_id"].tolist(), [int(x) for x in part["eval_seed"].iloc[:n:k]], k,
                                    float(part["temperature"].iloc[0]),
                                    part["success"].to_numpy(float).reshape(t, n),
                                    part["reward"].to_numpy(float).reshape(t, n))
    return list(cells.values())


def _results_markdown(cells: pd.DataFrame, path: Path) -> str:
    _need(cells, ["group", "seed", "start_model"], path)
    axes = list(cells.columns[:cells.columns.get_loc("group")])
    metrics = [m for m in REPORT_METRICS if m in cells.columns]
    if not metrics:
        return "(cells.csv holds none of the default sweep metrics)"
    records = [{"group": r["group"], "levels": {a: r[a] for a in axes},
                "metrics": {m: r[m] for m in metrics if pd.notna(r[m])}} for _, r in cells.iterrows()]
    return markdown_table(summarize(records, axes, metrics))


def _fidelity_markdown(cells: pd.DataFrame, path: Path) -> str:
    """The seed-level fidelity section (envace.sweeps.fidelity_seeds) when cells.csv holds worldbench metrics."""
    if not any(c.startswith("worldbench/") for c in cells.columns):
        return ""
    _need(cells, ["group", "kind", "seed", "start_model"], path)
    metrics = [c for c in cells.columns if c.startswith(("eval/", "worldbench/"))]
    records = [{"group": r["group"], "kind": r["kind"], "seed": int(r["seed"]), "start_model": r["start_model"],
                "metrics": {m: float(r[m]) for m in metrics if pd.notna(r[m])}} for _, r in cells.iterrows()]
    return f"## Fidelity at the seed level\n\n{fidelity_report(records)[2]}\n"


def analyze(dest: str | Path, *, n_boot: int = 10_000) -> dict[str, Any]:
    """The sweep's report from `dest`'s files alone: writes report.md and paired.csv there; returns the
    paired table, the Markdown, the paths and the wall time."""
    t0 = time.perf_counter()
    dest = Path(dest)
    for name in (OUTCOMES, CELLS):
        if not (dest / name).is_file():
            raise ValueError(f"{dest / name} not found: write it with `envace sweep export SWEEP_OUT_DIR {dest}`")
    contrasts: list[tuple[str, str]] = []
    if (dest / CONTRASTS).is_file():
        frame = pd.read_csv(dest / CONTRASTS, dtype=str)
        _need(frame, ["arm", "comparator"], dest / CONTRASTS)
        contrasts = list(zip(frame["arm"], frame["comparator"]))
    table = paired_table(cells_from_outcomes(dest / OUTCOMES), contrasts=contrasts, n_boot=n_boot)
    cells = pd.read_csv(dest / CELLS)
    markdown = (f"## Results (mean ± 95 % CI over seeds)\n\n{_results_markdown(cells, dest / CELLS)}\n\n"
                f"## Paired comparisons (seed level)\n\n{markdown_paired(table)}\n")
    fidelity = _fidelity_markdown(cells, dest / CELLS)
    markdown += f"\n{fidelity}" if fidelity else ""
    paths = {"report.md": dest / "report.md", "paired.csv": dest / "paired.csv"}
    paths["report.md"].write_text(markdown)
    table.to_csv(paths["paired.csv"], index=False)
    return {"table": table, "markdown": markdown, "paths": paths, "wall_s": time.perf_counter() - t0}
