"""Benchmarks: our per-benchmark scores and Overall beside the EnvACE paper's main table, with the
models that played policy, user simulator and judge, all from the `benchmarks/report.json` artifact that
`envace eval` logs (envace.benchmarks.report.report_dict: the paper's rows travel in the report, so this page
reads MLflow only and imports no benchmark code)."""

from __future__ import annotations

import html
import re

import plotly.graph_objects as go
import streamlit as st

from envace_dashboard import mlflow_data as md
from envace_dashboard.common import require_mlflow, settings
from envace_dashboard.tables import BENCH_COLUMNS, benchmark_details, benchmark_table

REPORT = "benchmarks/report.json"

uri = require_mlflow(settings(), "Benchmark reports")
st.title("Benchmarks")
found = md.runs_with_artifact(uri, REPORT)
if not found:
    st.info(f"No benchmark reports yet: no MLflow run has logged `{REPORT}` "
            f"(run `envace eval CHECKPOINT --benchmarks bfcl,tau2,vita`).")
    st.stop()
by_id = {r.run_id: r for r in found}
run_id = st.selectbox("Evaluation run", list(by_id), format_func=lambda i: by_id[i].label, key="bench_run")
run = by_id[run_id]
try:
    report = md.artifact_json(uri, run_id, REPORT)
    if not isinstance(report, dict):
        raise ValueError(f"{REPORT} holds a {type(report).__name__}, expected an object with 'ours' and 'benchmarks'")
except ValueError as exc:
    st.error(f"run {run_id}: {exc}")
    st.stop()
ours = f"ours: {run.name or run_id[:8]}"
table = benchmark_table(report, ours)
st.caption("Scores in percent. Overall = mean of BFCL-v4, τ²-Bench and VitaBench (shown only when all three ran).")
if not report.get("paper"):
    st.caption(f"This run's {REPORT} holds no `paper` rows: only its own scores are shown.")
st.dataframe(table, hide_index=True, key="bench_table")
fig = go.Figure()
for _, row in table.iterrows():
    fig.add_trace(go.Bar(name=html.escape(str(row["model"])), x=list(BENCH_COLUMNS.values()),
                         y=[row[c] for c in BENCH_COLUMNS.values()]))
fig.update_layout(barmode="group", height=360, yaxis_title="score (%)", margin=dict(l=10, r=10, t=20, b=10))
st.plotly_chart(fig, key="bench-chart")

st.subheader("Models and settings per benchmark")
details = benchmark_details(report)
if len(details):
    st.dataframe(details, hide_index=True, key="bench_details")
    for name, b in (report.get("benchmarks") or {}).items():
        deps = b.get("departures") or []
        if deps:
            plain = re.sub(r"[^A-Za-z0-9_.-]", "", str(name))  # an expander label renders markdown
            with st.expander(f"{len(deps)} departures from the official setup: {plain}"):
                st.text("\n".join(f"- {d}" for d in deps))
else:
    st.caption("The report lists no per-benchmark details.")
if report.get("paper_finmcp"):
    st.caption("FinMCP-Bench is reported apart (paper: TF1 / TP).")
    st.dataframe(report["paper_finmcp"], key="finmcp_table")
