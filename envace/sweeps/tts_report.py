"""The test-time-rehearsal (TTS) sweep's own report: the score-vs-N table per mode (and per model, e.g.
base = SFT only vs trained = after RL, and per memory strategy when the sweep has a `tts.memory` axis) with
95 % intervals over seeds, and the plot of score vs N, one line per (model, mode[, memory]). Input: the
sweep's long table (envace.sweeps.results.summarize) over the axes `tts.n`, `tts.mode` and optionally
`model` and `tts.memory`.

N = 0 (the plain run, no rehearsal) is run once per model, under the first mode and memory; in the report it
is the N = 0 point of every line, so each line starts from the same baseline.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

MAIN_METRIC = "eval/world/success"
N_AXIS, MODE_AXIS, MEMORY_AXIS = "tts.n", "tts.mode", "tts.memory"  # the TTS sweep's axes (tts_sweep_config)


def _lines(rows: pd.DataFrame) -> list[str]:
    """The columns that tell one line from another: model, mode and (with a memory axis) memory."""
    return ["model", "mode", *(["memory"] if "memory" in rows.columns else [])]


def tts_rows(table: pd.DataFrame) -> pd.DataFrame:
    """One row per (model, metric, mode[, memory], N): n seeds, mean, ci95, low, high; sorted for reading."""
    memory = MEMORY_AXIS in table.columns
    cols = ["model", "metric", "mode", *(["memory"] if memory else []), "N", "n", "mean", "ci95", "low", "high"]
    if table.empty:
        return pd.DataFrame(columns=cols)
    df = table.copy().rename(columns={MODE_AXIS: "mode", MEMORY_AXIS: "memory"})
    if "model" not in df.columns:
        df["model"] = ""
    df["N"] = df[N_AXIS].astype(int)
    keys = ["mode", *(["memory"] if memory else [])]
    rehearsed = df.loc[df["N"] > 0, keys].drop_duplicates()
    lines = rehearsed if not rehearsed.empty else df[keys].drop_duplicates()
    base = df[df["N"] == 0]
    # the plain run is every line's N = 0
    spread = [base.assign(**dict(zip(keys, line))) for line in lines.itertuples(index=False)]
    out = pd.concat([*spread, df[df["N"] > 0]], ignore_index=True)[cols]
    return out.sort_values(["model", "metric", *keys, "N"], kind="stable").reset_index(drop=True)


def _fmt(mean: float, ci: float) -> str:
    if mean is None or math.isnan(mean):
        return "n/a"
    return f"{mean:.3f}" if ci is None or math.isnan(ci) else f"{mean:.3f} ± {ci:.3f}"


def tts_markdown(rows: pd.DataFrame, metric: str = MAIN_METRIC) -> str:
    """Markdown table: rows (model, mode[, memory]), columns N, cells mean ± 95 % CI half-width."""
    part = rows[rows["metric"] == metric]
    if part.empty:
        return f"(no rows for {metric})"
    ns = sorted(part["N"].unique())
    keys = _lines(part)
    lines = ["| " + " | ".join(keys) + " | " + " | ".join(f"N={n}" for n in ns) + " |",
             "|" + "---|" * (len(keys) + len(ns))]
    for key, g in part.groupby(keys, sort=False):
        cells = {int(r.N): _fmt(r.mean, r.ci95) for r in g.itertuples()}
        names = [key[0] or "-", *key[1:]]
        lines.append("| " + " | ".join(map(str, names)) + " | " + " | ".join(cells.get(int(n), "") for n in ns) + " |")
    return "\n".join(lines)


def tts_figure(rows: pd.DataFrame, metric: str = MAIN_METRIC):
    """Plotly lines: score vs N per (model, mode[, memory]), 95 % CI as error bars."""
    from envace.extras import require

    go = require("plotly.graph_objects", "flows", "a sweep's HTML plot")

    fig = go.Figure()
    part = rows[rows["metric"] == metric]
    for key, g in part.groupby(_lines(part), sort=False):
        name = " · ".join(str(k) for k in key if k)
        fig.add_trace(go.Scatter(x=g["N"], y=g["mean"], mode="lines+markers", name=name,
                                 error_y={"type": "data", "array": g["ci95"].fillna(0).tolist(), "visible": True}))
    fig.update_layout(title=f"Test-time rehearsal: {metric} vs N (mean ± 95% CI over seeds)",
                      xaxis_title="N (private rehearsals; 0 = plain run)", yaxis_title=metric, height=450, width=700)
    fig.update_xaxes(dtick=1)
    return fig


def write_tts_report(out_dir: str | Path, table: pd.DataFrame, metric: str = MAIN_METRIC) -> dict[str, Path]:
    """tts_table.csv (every metric), tts_table.md and tts_plot.html (the main metric) under `out_dir`."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rows = tts_rows(table)
    if not rows.empty and metric not in set(rows["metric"]):
        metric = str(rows["metric"].iloc[0])
    paths = {"tts_table.csv": out / "tts_table.csv", "tts_table.md": out / "tts_table.md",
             "tts_plot.html": out / "tts_plot.html"}
    rows.to_csv(paths["tts_table.csv"], index=False)
    paths["tts_table.md"].write_text(tts_markdown(rows, metric) + "\n")
    tts_figure(rows, metric).write_html(paths["tts_plot.html"], include_plotlyjs=True)
    return paths
