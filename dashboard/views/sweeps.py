"""Sweeps: the ablation table (mean ± 95 % CI per grid point, as the sweep flow logged it in
`sweep/results.csv`), the seed-level paired comparisons (`sweep/paired.csv`, one table per evaluation pass),
the per-arm training curves (`sweep/curves.csv`: mean over seeds per step, 95 % band)
and the test-time-rehearsal chart (score vs N, one line per mode, from
`tts/results.csv`), read from MLflow artifacts."""

from __future__ import annotations

import html
import math

import plotly.graph_objects as go
import streamlit as st

from envace.sweeps.paired_report import header_line
from envace_dashboard import mlflow_data as md
from envace_dashboard.common import require_mlflow, settings
from envace_dashboard.tables import (
    curves_frame,
    label_column,
    paired_frame,
    paired_metrics,
    read_csv,
    sweep_table,
    tts_frame,
    tts_lines,
)

SWEEP_CSV = "sweep/results.csv"
CURVES_CSV = "sweep/curves.csv"
PAIRED_CSV = "sweep/paired.csv"
TTS_CSV = "tts/results.csv"
PREFERRED_METRICS = ("score", "reward", "success")

uri = require_mlflow(settings(), "Sweep results")
st.title("Sweeps")


def pick_table(path: str, what: str, label: str, key: str, parse):
    """The user picks one of the runs that logged the CSV artifact `path`; returns `parse` of it, or
    None after telling the user why there is nothing to show (no such run, or a malformed file)."""
    found = md.runs_with_artifact(uri, path, top_level_only=True)
    if not found:
        st.info(f"No {what} yet: no MLflow run has logged `{path}` (run `envace sweep run CONFIG`).")
        return None
    by_id = {r.run_id: r for r in found}
    run = by_id[st.selectbox(label, list(by_id), format_func=lambda i: by_id[i].label, key=key)]
    try:
        return parse(read_csv(md.artifact_text(uri, run.run_id, path), path))
    except ValueError as exc:
        st.error(str(exc))
        return None


st.header("Ablation sweep")
table = pick_table(SWEEP_CSV, "sweeps", "Sweep run", "sweep_run", sweep_table)
if table is not None:
    st.dataframe(table, hide_index=True, key="sweep_table")
    label = label_column(table)
    metrics = list(dict.fromkeys(table["metric"].astype(str))) if "metric" in table.columns else [None]
    for metric in metrics:
        part = table if metric is None else table[table["metric"].astype(str) == metric]
        fig = go.Figure(go.Bar(x=[html.escape(str(v)) for v in part[label]], y=part["mean"].tolist(),
                               error_y=dict(type="data", array=part["ci95"].fillna(0).tolist(), visible=True)))
        fig.update_layout(title=f"mean ± 95% CI{'' if metric is None else ' · ' + html.escape(metric)}",
                          height=340, margin=dict(l=10, r=10, t=40, b=10))
        st.plotly_chart(fig, key=f"sweep-chart-{metric}")

st.header("Paired comparisons (seed level)")
paired = pick_table(PAIRED_CSV, "paired comparisons", "Sweep run (paired)", "paired_run",
                    lambda df: df.assign(**{"pass": df["pass"].astype(str)}) if "pass" in df.columns else df)
if paired is not None:
    metrics = paired_metrics(paired) or ["success"]
    metric = st.selectbox("Metric", metrics, key="paired_metric")
    for pass_name in dict.fromkeys(paired["pass"]) if "pass" in paired.columns else [None]:
        part = paired if pass_name is None else paired[paired["pass"] == pass_name]
        try:
            shown = paired_frame(part, metric)
        except ValueError as exc:
            st.error(str(exc))
            break
        st.subheader(f"pass {pass_name}")
        st.caption(header_line(part))
        st.dataframe(shown, hide_index=True, key=f"paired-{pass_name}")

st.header("Training curves per arm")
curves = pick_table(CURVES_CSV, "per-arm curves", "Sweep run (curves)", "curves_run", curves_frame)
if curves is not None:
    names = list(dict.fromkeys(curves["metric"]))
    metric = st.selectbox("Metric", names, key="curves_metric")
    part = curves[curves["metric"] == metric]
    fig = go.Figure()
    for group in dict.fromkeys(part["group"]):
        g = part[part["group"] == group]
        fig.add_trace(go.Scatter(x=g["step"].tolist(), y=g["mean"].tolist(), mode="lines+markers",
                                 name=html.escape(str(group)),
                                 error_y=dict(type="data", array=(g["high"] - g["mean"]).fillna(0).tolist(),
                                              visible=True)))
    fig.update_layout(title=f"{html.escape(metric)}: mean over seeds, 95% CI", xaxis_title="step", height=380,
                      margin=dict(l=10, r=10, t=40, b=10))
    st.plotly_chart(fig, key="curves-chart")

st.header("Test-time rehearsal")
tts = pick_table(TTS_CSV, "TTS sweeps", "TTS sweep run", "tts_run", tts_frame)
if tts is not None:
    if "metric" in tts.columns:
        names = list(dict.fromkeys(tts["metric"]))
        first = next((names.index(m) for m in PREFERRED_METRICS if m in names), 0)
        metric = st.selectbox("Metric", names, index=first, key="tts_metric")
        tts = tts[tts["metric"] == metric]
    fig = go.Figure()
    for mode, pts in tts_lines(tts).items():
        fig.add_trace(go.Scatter(x=[p[0] for p in pts], y=[p[1] for p in pts], mode="lines+markers",
                                 name=html.escape(mode),
                                 error_y=dict(type="data", array=[0 if math.isnan(p[2]) else p[2] for p in pts],
                                              visible=True)))
    fig.update_layout(title="score vs N (private rehearsals before the committed run)", xaxis_title="N",
                      yaxis_title="score", xaxis=dict(tickmode="linear", dtick=1), height=380,
                      margin=dict(l=10, r=10, t=40, b=10))
    st.plotly_chart(fig, key="tts-chart")
    st.caption("N = 1 (no private rehearsal) is one run shared by both modes; it starts each line.")
    st.dataframe(tts, hide_index=True, key="tts_table")
