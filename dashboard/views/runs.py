"""Runs: every stored run with its status, method (rollout mode / policy), key params and final MLflow
metrics; MLflow runs that have no trajectories in the store (sweep parents, evaluations) below; one run
opened in detail; two runs' configs side by side with the differing keys highlighted."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from envace.secrets import mask_secrets, mask_text
from envace_dashboard import mlflow_data as md
from envace_dashboard import store_data as sd
from envace_dashboard.common import require_store, settings
from envace_dashboard.tables import config_diff, final_metrics, highlight_diff, key_params, run_method

s = settings()
store = require_store(s)
st.title("Runs")
ml: dict[str, md.MlRun] = {}
if s.mlflow_uri is not None:
    try:
        ml = md.runs_by_id(s.mlflow_uri)
    except Exception as exc:  # noqa: BLE001 - the store's runs are still worth showing
        st.warning(mask_text(f"MLflow at {s.mlflow_uri} could not be read: {exc}"))
else:
    st.caption(f"MLflow not configured ({s.mlflow_error}); final metrics are not shown.")

PAGE_SIZE = 50
page = st.number_input("Page", min_value=1, value=1, step=1, key="runs_page")
pg = sd.runs_page(store, int(page), PAGE_SIZE)
st.caption(f"{pg.total} runs in the store · page {pg.page} of {pg.n_pages}")
rows = []
for r in pg.items:
    m = ml.get(r.mlflow_run_id or "")
    row = {"run": r.id, "name": r.name, "kind": r.kind.value, "status": r.status.value,
           "method": run_method(r.config, m.tags if m else None), "created": r.created_at,
           **key_params(r.config), **final_metrics(m.metrics if m else None), "mlflow run": r.mlflow_run_id}
    rows.append(row)
if rows:
    st.dataframe(pd.DataFrame(rows), hide_index=True, key="runs_table")
else:
    st.info("No runs in the store yet: train or evaluate something first (e.g. `envace demo`).")

linked = {r.mlflow_run_id for r in sd.run_choices(store) if r.mlflow_run_id}
others = [m for m in ml.values() if m.run_id not in linked]
if others:
    st.subheader("MLflow runs without stored trajectories")
    st.dataframe(pd.DataFrame([{"mlflow run": m.run_id, "name": m.name, "experiment": m.experiment,
                                "status": m.status, "parent": m.parent_id, "method": run_method(None, m.tags),
                                **final_metrics(m.metrics)} for m in others]), hide_index=True, key="ml_table")

choices = sd.run_choices(store)
if not choices:
    st.stop()
labels = {r.id: f"{r.name or r.id} · {r.kind.value} · {r.status.value} · {r.id}" for r in choices}
ids = list(labels)

st.header("Open a run")
run_id = st.selectbox("Run", ids, format_func=labels.get, key="open_run")
run = next(r for r in choices if r.id == run_id)
summary = sd.run_summary(store, run_id)
st.page_link("views/trajectories.py", label="Browse this run's trajectories", query_params={"run": run_id})
if summary is not None and summary.n_trajectories:
    c = st.columns(4)
    c[0].metric("Trajectories", summary.n_trajectories)
    c[1].metric("Steps", f"{summary.first_step} – {summary.last_step}")
    c[2].metric("Status", run.status.value)
    tags = ml[run.mlflow_run_id].tags if run.mlflow_run_id in ml else None
    c[3].metric("Method", run_method(run.config, tags) or "—")
    st.dataframe(pd.DataFrame([{"mode": b.mode.value, "split": b.split, "trajectories": b.n, "scored": b.n_scored,
                                "mean reward": b.mean_reward} for b in summary.by_mode]), hide_index=True)
    st.dataframe(pd.DataFrame([summary.terminations]), hide_index=True)
    last = summary.last_step
    lo = max(summary.first_step, last - 9)
    st.caption(f"Per role and per tool at steps {lo} – {last} (the last ten steps)")
    roles = sd.role_stats(store, run_id, lo, last)
    st.dataframe(pd.DataFrame([{"role": r.role.value, "turns": r.n_turns, "mean tokens": r.mean_tokens,
                                "mean advantage": r.mean_advantage, "parse errors": r.n_parse_errors}
                               for r in roles]), hide_index=True)
    fid = sd.fidelity_by_tool(store, run_id, lo, last)
    if fid:
        st.dataframe(pd.DataFrame([vars(f) for f in fid]), hide_index=True)
else:
    st.caption("No stored trajectories for this run yet.")
m = ml.get(run.mlflow_run_id or "")
if m is not None:
    with st.expander("MLflow: final metrics, params and tags"):
        st.dataframe(pd.DataFrame(sorted(m.metrics.items()), columns=["metric", "last value"]), hide_index=True)
        st.dataframe(pd.DataFrame(sorted(mask_secrets(m.params).items()), columns=["param", "value"]), hide_index=True)
        st.dataframe(pd.DataFrame(sorted(m.tags.items()), columns=["tag", "value"]), hide_index=True)
with st.expander("Resolved config"):
    st.json(mask_secrets(run.config or {}))  # runs stored before masking may still hold a URL password

st.header("Compare two runs")
if len(ids) < 2:
    st.caption("Only one run in the store.")
    st.stop()
c = st.columns(2)
a_id = c[0].selectbox("Run A", ids, index=0, format_func=labels.get, key="cmp_a")
b_id = c[1].selectbox("Run B", ids, index=1, format_func=labels.get, key="cmp_b")
cfg = {r.id: mask_secrets(r.config) for r in choices}
diff = config_diff(cfg[a_id], cfg[b_id])
only = st.toggle("Only keys that differ", value=True, key="only_diff")
n_diff = int(diff["differs"].sum()) if len(diff) else 0
st.caption(f"{n_diff} of {len(diff)} config keys differ (highlighted)")
shown = diff[diff["differs"]] if only else diff
shown = shown.rename(columns={"a": "A: " + a_id, "b": "B: " + b_id})
st.dataframe(highlight_diff(shown), hide_index=True, key="diff_table")
