"""Sweeps: the ablation table (mean ± 95 % CI per grid point, as the sweep flow logged it in
`sweep/results.csv`) and the test-time-rehearsal chart (score vs N, one line per mode, from
`tts/results.csv`), read from MLflow artifacts."""

from __future__ import annotations

import html
import math

import plotly.graph_objects as go
import streamlit as st

from dashboard import mlflow_data as md
from dashboard.common import require_mlflow, settings
from dashboard.tables import label_column, read_csv, sweep_table, tts_frame, tts_lines

SWEEP_CSV = "sweep/results.csv"
TTS_CSV = "tts/results.csv"
PREFERRED_METRICS = ("score", "reward", "success")

uri = require_mlflow(settings(), "Sweep results")
st.title("Sweeps")


def pick(path: str, what: str, label: str, key: str) -> md.MlRun | None:
    found = md.runs_with_artifact(uri, path, top_level_only=True)
    if not found:
        st.info(f"No {what} yet: no MLflow run has logged `{path}` (run `envace sweep run CONFIG`).")
        return None
    by_id = {r.run_id: r for r in found}
    return by_id[st.selectbox(label, list(by_id), format_func=lambda i: by_id[i].label, key=key)]


st.header("Ablation sweep")
run = pick(SWEEP_CSV, "sweeps", "Sweep run", "sweep_run")
if run is not None:
    try:
        table = sweep_table(read_csv(md.artifact_text(uri, run.run_id, SWEEP_CSV), SWEEP_CSV))
    except ValueError as exc:
        st.error(str(exc))
    else:
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

st.header("Test-time rehearsal")
run = pick(TTS_CSV, "TTS sweeps", "TTS sweep run", "tts_run")
if run is not None:
    try:
        tts = tts_frame(read_csv(md.artifact_text(uri, run.run_id, TTS_CSV), TTS_CSV))
    except ValueError as exc:
        st.error(str(exc))
    else:
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
