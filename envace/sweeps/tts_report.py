"""The test-time-rehearsal (TTS) sweep's own report: the score-vs-N table per mode (and per model, e.g.
base = SFT only vs trained = after RL) with 95 % intervals over seeds, and the plot of score vs N, one
line per (model, mode). Input: the sweep's long table (envace.sweeps.results.summarize) over the axes
`tts_n`, `tts_mode` and optionally `model`.

N = 0 (the plain run, no rehearsal) is run once per model, under the first mode; in the report it is the
N = 0 point of every mode's line, so each line starts from the same baseline.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

MAIN_METRIC = "eval/world/success"


def tts_rows(table: pd.DataFrame) -> pd.DataFrame:
    """One row per (model, metric, mode, N): n seeds, mean, ci95, low, high; sorted for reading."""
    if table.empty:
        return pd.DataFrame(columns=["model", "metric", "mode", "N", "n", "mean", "ci95", "low", "high"])
    df = table.copy()
    if "model" not in df.columns:
        df["model"] = ""
    df["N"] = df["tts_n"].astype(int)
    modes = list(dict.fromkeys(df.loc[df["N"] > 0, "tts_mode"])) or list(dict.fromkeys(df["tts_mode"]))
    base = df[df["N"] == 0]
    rest = df[df["N"] > 0]
    spread = [base.assign(tts_mode=m) for m in modes]  # the plain run is every mode's N = 0
    out = pd.concat([*spread, rest], ignore_index=True).rename(columns={"tts_mode": "mode"})
    out = out[["model", "metric", "mode", "N", "n", "mean", "ci95", "low", "high"]]
    return out.sort_values(["model", "metric", "mode", "N"], kind="stable").reset_index(drop=True)


def _fmt(mean: float, ci: float) -> str:
    if mean is None or math.isnan(mean):
        return "n/a"
    return f"{mean:.3f}" if ci is None or math.isnan(ci) else f"{mean:.3f} ± {ci:.3f}"


def tts_markdown(rows: pd.DataFrame, metric: str = MAIN_METRIC) -> str:
    """Markdown table: rows (model, mode), columns N, cells mean ± 95 % CI half-width."""
    part = rows[rows["metric"] == metric]
    if part.empty:
        return f"(no rows for {metric})"
    ns = sorted(part["N"].unique())
    lines = ["| model | mode | " + " | ".join(f"N={n}" for n in ns) + " |",
             "|---|---|" + "---|" * len(ns)]
    for (model, mode), g in part.groupby(["model", "mode"], sort=False):
        cells = {int(r.N): _fmt(r.mean, r.ci95) for r in g.itertuples()}
        lines.append(f"| {model or '-'} | {mode} | " + " | ".join(cells.get(int(n), "") for n in ns) + " |")
    return "\n".join(lines)


def tts_figure(rows: pd.DataFrame, metric: str = MAIN_METRIC):
    """Plotly lines: score vs N per (model, mode), 95 % CI as error bars."""
    import plotly.graph_objects as go

    fig = go.Figure()
    part = rows[rows["metric"] == metric]
    for (model, mode), g in part.groupby(["model", "mode"], sort=False):
        name = f"{model} · {mode}" if model else str(mode)
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
