"""Per-arm training curves of a sweep: each grid point's training metrics over steps, pooled over its seeds.

The results table says where the arms end; the curves say how they got there. For every training cell the
metrics in `CURVE_METRICS` are read back from the cell's MLflow run (the run holds each step once; after a
resume the first value logged for a step is the one kept, as `metric_history` says), and for every
(grid point, metric, step) the seeds' values give n, the mean and the two-sided Student-t 95 % interval
(`envace.sweeps.results.t_interval`; NaN bounds with one seed). A step that one seed did not log (a cell
that crashed mid-run) is pooled over the seeds that did, so `n` says how many curves a point rests on.

The default metrics are the world-model readings of a rehearse-mode run next to its reward: shadow exact
match and rehearsed-error recall / precision (envace.trainers.arms.shadow: the real world replays the step's
calls) and each role's sampling entropy. Arms that do not log a metric (shadow needs rehearse mode) get no
rows for it; nothing is filled with zeros.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from envace.sweeps.results import t_interval

CURVE_METRICS = ("reward/mean", "shadow/exact_match", "shadow/error_recall", "shadow/error_precision",
                 "rehearse/entropy", "act/entropy")
CURVE_COLUMNS = ["group", "metric", "step", "n", "mean", "low", "high"]


def _client(mlflow_uri: str | None):
    from mlflow.tracking import MlflowClient

    from envace.tracking.mlflow_run import resolve_tracking_uri

    return MlflowClient(tracking_uri=resolve_tracking_uri(mlflow_uri)[0])


def metric_history(mlflow_uri: str | None, run_id: str | None, key: str, client: Any = None) -> dict[int, float]:
    """{step: value} of one metric of an MLflow run; a step logged twice (a resumed run re-logs the steps
    after its last checkpoint) keeps its first value. Empty when the run or the metric is absent. `client`:
    an MlflowClient to reuse across calls (default: one for `mlflow_uri`)."""
    if not run_id:
        return {}
    points = (client or _client(mlflow_uri)).get_metric_history(run_id, key)
    by_step: dict[int, float] = {}
    for m in sorted(points, key=lambda m: (m.step, m.timestamp)):
        by_step.setdefault(int(m.step), float(m.value))
    return by_step


def curves_table(histories: Sequence[tuple[str, Mapping[str, Mapping[int, float]]]],
                 confidence: float = 0.95) -> pd.DataFrame:
    """`histories`: one (grid point, {metric: {step: value}}) per cell. Returns one row per
    (grid point, metric, step) with n, mean, low, high over the cells of that grid point that logged it.
    Grid points and metrics keep their first-seen order; steps ascend."""
    pooled: dict[str, dict[str, dict[int, list[float]]]] = {}
    for group, per_metric in histories:
        g = pooled.setdefault(group, {})
        for metric, points in per_metric.items():
            for step, value in points.items():
                g.setdefault(metric, {}).setdefault(int(step), []).append(float(value))
    rows = []
    for group, per_metric in pooled.items():
        for metric, steps in per_metric.items():
            for step in sorted(steps):
                s = t_interval(steps[step], confidence)
                rows.append({"group": group, "metric": metric, "step": step, "n": s["n"], "mean": s["mean"],
                             "low": s["low"], "high": s["high"]})
    return pd.DataFrame(rows, columns=CURVE_COLUMNS)


def sweep_curves(records: Sequence[Mapping[str, Any]], mlflow_uri: str | None,
                 metrics: Sequence[str] = CURVE_METRICS) -> pd.DataFrame:
    """The curves of a sweep's training cells (records as the sweep returns them; eval cells have no steps)."""
    train = [r for r in records if r.get("kind") == "train" and r.get("mlflow_run_id")]
    client = _client(mlflow_uri) if train else None
    histories = []
    for r in train:
        per_metric = {m: metric_history(mlflow_uri, r["mlflow_run_id"], m, client) for m in metrics}
        histories.append((r["group"], {m: h for m, h in per_metric.items() if h}))
    return curves_table(histories)


def curves_figure(table: pd.DataFrame, title: str):
    """One panel per metric, one line per grid point, 95 % error bars where there are ≥ 2 seeds."""
    from envace.extras import require

    go = require("plotly.graph_objects", "flows", "a sweep's HTML plot")
    make_subplots = require("plotly.subplots", "flows", "a sweep's HTML plot").make_subplots

    metrics = list(dict.fromkeys(table["metric"]))
    fig = make_subplots(rows=max(1, len(metrics)), cols=1, subplot_titles=metrics or ["(no curves)"])
    for i, metric in enumerate(metrics, start=1):
        part = table[table["metric"] == metric]
        for group in dict.fromkeys(part["group"]):
            g = part[part["group"] == group]
            fig.add_trace(go.Scatter(x=g["step"], y=g["mean"], mode="lines", name=group, legendgroup=group,
                                     showlegend=i == 1, error_y={"type": "data", "visible": True,
                                                                 "array": (g["high"] - g["mean"]).fillna(0).tolist()}),
                          row=i, col=1)
    fig.update_layout(title=f"{title}: per-arm training curves (mean over seeds, 95 % CI)",
                      height=max(400, 300 * len(metrics)), width=900)
    return fig


def write_curves(out_dir: str | Path, table: pd.DataFrame, title: str) -> dict[str, Path]:
    """curves.csv and curves.html under `out_dir`."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"curves.csv": out / "curves.csv", "curves.html": out / "curves.html"}
    table.to_csv(paths["curves.csv"], index=False)
    curves_figure(table, title).write_html(paths["curves.html"], include_plotlyjs=True)
    return paths


def markdown_curves(table: pd.DataFrame, steps: Sequence[int] | None = None) -> str:
    """A compact Markdown view: one row per (grid point, metric), the mean ± half-width at a few steps
    (default: the first, the middle and the last logged step of the table)."""
    if table.empty:
        return "(no training curves)"
    all_steps = sorted(set(int(s) for s in table["step"]))
    steps = list(steps) if steps else sorted({all_steps[0], all_steps[len(all_steps) // 2], all_steps[-1]})
    lines = ["| grid point | metric | " + " | ".join(f"step {s}" for s in steps) + " |",
             "|---|---|" + "---|" * len(steps)]
    for (group, metric), part in table.groupby(["group", "metric"], sort=False):
        by_step = {int(r.step): r for r in part.itertuples()}
        cells = []
        for s in steps:
            r = by_step.get(s)
            if r is None:
                cells.append("–")
            elif pd.isna(r.high):
                cells.append(f"{r.mean:.3f} (n={r.n})")
            else:
                cells.append(f"{r.mean:.3f} ± {r.high - r.mean:.3f}")
        lines.append(f"| {group} | {metric} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
