"""Sweep results: per-cell rows, a mean ± 95 % CI table over seeds, a plot, and the sweep's MLflow
parent run.

The CI is the two-sided Student-t interval over the seeds of one grid point:
mean ± t_{0.975, n-1} · s / sqrt(n), with s the sample standard deviation (n-1 denominator). With a
single seed the interval is undefined and reported as NaN, not as zero width. Failed cells are left
out of the table (and listed in the summary), so `n` is the number of seeds that finished.

The parent run of a sweep is remembered in `<out_dir>/sweep_state.json`; re-running the sweep resumes
that run (so cached cells, whose child runs hang under it, stay in one place). When the recorded run
is gone (another MLflow store), a new parent is started.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pandas as pd

from envace.sweeps.grid import SweepConfig

STATE_FILE = "sweep_state.json"
TABLE_COLUMNS = ["metric", "n", "mean", "std", "ci95", "low", "high", "display"]


def t_interval(values: Sequence[float], confidence: float = 0.95) -> dict[str, float]:
    """n, mean, sample std, CI half-width and bounds of `values` (Student t, n-1 degrees of freedom)."""
    from scipy.stats import t as student_t

    xs = [float(v) for v in values if v is not None and not math.isnan(float(v))]
    n = len(xs)
    if n == 0:
        return {"n": 0, "mean": math.nan, "std": math.nan, "ci95": math.nan, "low": math.nan, "high": math.nan}
    mean = sum(xs) / n
    if n == 1:
        return {"n": 1, "mean": mean, "std": math.nan, "ci95": math.nan, "low": math.nan, "high": math.nan}
    std = math.sqrt(sum((x - mean) ** 2 for x in xs) / (n - 1))
    half = float(student_t.ppf(0.5 + confidence / 2, n - 1)) * std / math.sqrt(n)
    return {"n": n, "mean": mean, "std": std, "ci95": half, "low": mean - half, "high": mean + half}


def _display(stats: Mapping[str, float]) -> str:
    if math.isnan(stats["mean"]):
        return "n/a"
    if math.isnan(stats["ci95"]):
        return f"{stats['mean']:.3f} (n=1)"
    return f"{stats['mean']:.3f} ± {stats['ci95']:.3f}"


def cells_frame(records: Sequence[Mapping[str, Any]], axes: Sequence[str]) -> pd.DataFrame:
    """One row per finished cell: axis levels, seed, cell name, MLflow run id and every metric."""
    rows = []
    for r in records:
        row = {a: r.get("levels", {}).get(a) for a in axes}
        row.update({"group": r["group"], "seed": r["seed"], "cell": r["cell"], "mlflow_run_id": r.get("mlflow_run_id")})
        row.update(r.get("metrics", {}))
        rows.append(row)
    return pd.DataFrame(rows)


def summarize(records: Sequence[Mapping[str, Any]], axes: Sequence[str], metrics: Sequence[str],
              confidence: float = 0.95) -> pd.DataFrame:
    """Long table: one row per (grid point, metric) with n, mean, std, CI half-width, bounds, display.
    Grid points keep the order in which they first appear in `records`."""
    groups: dict[str, dict[str, Any]] = {}
    for r in records:
        g = groups.setdefault(r["group"], {"levels": r.get("levels", {}), "metrics": {m: [] for m in metrics}})
        for m in metrics:
            v = r.get("metrics", {}).get(m)
            if v is not None:
                g["metrics"][m].append(v)
    rows = []
    for group, g in groups.items():
        for m in metrics:
            stats = t_interval(g["metrics"][m], confidence)
            rows.append({**{a: g["levels"].get(a) for a in axes}, "group": group, "metric": m, **stats,
                         "display": _display(stats)})
    return pd.DataFrame(rows, columns=[*axes, "group", *TABLE_COLUMNS])


def wide_table(table: pd.DataFrame) -> pd.DataFrame:
    """Grid points as rows, metrics as columns, 'mean ± ci' cells (the table a paper shows)."""
    if table.empty:
        return table
    return table.pivot(index="group", columns="metric", values="display").reindex(table["group"].unique())


def results_figure(table: pd.DataFrame, title: str):
    """Plotly bar chart per metric: mean with the 95 % CI as error bars, one bar per grid point."""
    from envace.extras import require

    go = require("plotly.graph_objects", "flows", "a sweep's HTML plot")
    make_subplots = require("plotly.subplots", "flows", "a sweep's HTML plot").make_subplots

    metrics = list(dict.fromkeys(table["metric"])) or ["(none)"]
    fig = make_subplots(rows=1, cols=len(metrics), subplot_titles=metrics)
    for i, m in enumerate(metrics, start=1):
        part = table[table["metric"] == m]
        fig.add_trace(go.Bar(x=part["group"], y=part["mean"], name=m, showlegend=False,
                             error_y={"type": "data", "array": part["ci95"].fillna(0).tolist(), "visible": True},
                             hovertext=part["display"]), row=1, col=i)
    fig.update_layout(title=f"{title}: mean ± 95% CI over seeds", height=450, width=max(500, 420 * len(metrics)))
    return fig


def write_results(out_dir: str | Path, cells: pd.DataFrame, table: pd.DataFrame, summary: Mapping[str, Any],
                  title: str) -> dict[str, Path]:
    """results.csv, results_wide.csv, results.html, cells.csv, summary.json under `out_dir`."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"results.csv": out / "results.csv", "results_wide.csv": out / "results_wide.csv",
             "cells.csv": out / "cells.csv", "results.html": out / "results.html", "summary.json": out / "summary.json"}
    table.to_csv(paths["results.csv"], index=False)
    wide_table(table).to_csv(paths["results_wide.csv"])
    cells.to_csv(paths["cells.csv"], index=False)
    results_figure(table, title).write_html(paths["results.html"], include_plotlyjs=True)
    paths["summary.json"].write_text(json.dumps(summary, indent=2, default=str))
    return paths


def markdown_table(table: pd.DataFrame) -> str:
    """The wide table as Markdown (for the Prefect artifact and the console)."""
    wide = wide_table(table)
    if wide.empty:
        return "(no finished cells)"
    cols = list(wide.columns)
    lines = ["| grid point | " + " | ".join(cols) + " |", "|---" * (len(cols) + 1) + "|"]
    for group, row in wide.iterrows():
        lines.append(f"| {group} | " + " | ".join(str(row[c]) for c in cols) + " |")
    return "\n".join(lines)


# ----- the sweep's MLflow parent run ------------------------------------------------------------


def _recorded_parent(cfg: SweepConfig) -> str | None:
    path = Path(cfg.out_dir) / STATE_FILE
    if not path.is_file():
        return None
    state = json.loads(path.read_text())
    run_id = state.get("parent_run_id")
    if not run_id:
        return None
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    from envace.tracking.mlflow_run import resolve_tracking_uri

    uri, _ = resolve_tracking_uri(cfg.resolved_mlflow_uri())
    try:
        run = MlflowClient(tracking_uri=uri).get_run(run_id)
    except MlflowException:
        return None
    return run_id if run.info.lifecycle_stage == "active" else None


@contextmanager
def sweep_parent_run(cfg: SweepConfig) -> Iterator[Any]:
    """Open (or resume) the sweep's MLflow parent run; yields the `MlflowRun` handle."""
    from envace.tracking.run_record import RunRecord

    resume = _recorded_parent(cfg)
    with RunRecord(cfg.locations()) as record:
        run = record.start_mlflow(cfg.experiment, cfg.name, cfg, kind="sweep", resume_run_id=resume,
                                  tags={"envace.sweep": cfg.name})
        state = Path(cfg.out_dir) / STATE_FILE
        state.parent.mkdir(parents=True, exist_ok=True)
        from envace.secrets import mask_text  # the file records where the runs are, never a password

        state.write_text(json.dumps({"parent_run_id": run.run_id, "mlflow_uri": mask_text(cfg.resolved_mlflow_uri()),
                                     "experiment": cfg.experiment}, indent=2))
        yield run


def log_results(run: Any, paths: Mapping[str, Path], artifact_dir: str, failed: Mapping[str, str]) -> None:
    """The result files as artifacts under `<artifact_dir>/`, the failures as a tag. The HTML embeds
    plotly.js (about 4 MB) so it opens on an offline machine."""
    for path in paths.values():
        run.log_artifact(path, artifact_dir)
    run.set_tags({"envace.failed_cells": json.dumps(sorted(failed)) if failed else "[]"})
