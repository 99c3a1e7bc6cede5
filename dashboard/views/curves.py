"""Learning curves: per-role metrics over steps from MLflow (reward, advantage, KL, clip fraction, the
Rehearse parse-error rate, rehearsal fidelity, and the exploitation monitor's rehearsed vs real reward of a
rehearse-mode training run), several runs overlaid, one interactive chart per metric
group (plotly), plus any other logged metric on request."""

from __future__ import annotations

import html

import plotly.graph_objects as go
import streamlit as st

from envace_dashboard import mlflow_data as md
from envace_dashboard.common import require_mlflow, settings
from envace_dashboard.tables import METRIC_GROUPS, group_keys

uri = require_mlflow(settings(), "Learning curves")
st.title("Learning curves")
runs = [r for r in md.runs(uri) if r.metrics]
if not runs:
    st.info("No MLflow run has logged metrics yet.")
    st.stop()
by_id = {r.run_id: r for r in runs}
default = [r.run_id for r in runs if "reward/mean" in r.metrics][:3] or [runs[0].run_id]
chosen = st.sidebar.multiselect("Runs", list(by_id), default=default, format_func=lambda i: by_id[i].label,
                                key="curve_runs")
if not chosen:
    st.info("Pick one or more runs in the sidebar.")
    st.stop()
keys = sorted({k for i in chosen for k in by_id[i].metrics})
extra = st.sidebar.multiselect("Other metrics", keys, key="extra_metrics")


def chart(title: str, metric_keys: list[str], key: str) -> None:
    fig = go.Figure()
    for run_id in chosen:
        run = by_id[run_id]
        for k in metric_keys:
            if k not in run.metrics:
                continue
            pts = md.metric_history(uri, run_id, k)
            fig.add_trace(go.Scatter(x=[p[0] for p in pts], y=[p[1] for p in pts], mode="lines+markers",
                                     name=html.escape(f"{run.name or run_id[:8]} · {k}")))  # plotly reads tags
    if not fig.data:
        st.caption(f"{title}: not logged by the selected runs")
        return
    fig.update_layout(title=title, xaxis_title="step", height=360, margin=dict(l=10, r=10, t=40, b=10),
                      legend=dict(orientation="h", yanchor="top", y=-0.25))
    st.plotly_chart(fig, key=key)


groups = list(METRIC_GROUPS.items())
for i in range(0, len(groups), 2):
    cols = st.columns(2)
    for col, (title, pattern) in zip(cols, groups[i:i + 2]):
        with col:
            chart(title, group_keys(keys, pattern), key=f"chart-{title}")
for k in extra:
    chart(k, [k], key=f"extra-{k}")
