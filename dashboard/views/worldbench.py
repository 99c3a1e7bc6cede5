"""Worldbench: the behaviour metrics of a scoring run (BehR, environment-token NLL, WM2Real agreement, rubric
judge; read from its MLflow metrics) and each scored transition's predicted response beside the real one,
filterable by source, tool and leaf-F1 range (rows written by `envace worldbench score`, read through the
store)."""

from __future__ import annotations

import json

import pandas as pd
import streamlit as st

from envace_dashboard import worldbench_data as wd
from envace_dashboard.common import optional, require_store, settings


def behaviour_section(mlflow_uri: str | None) -> None:
    """The behaviour metrics of the chosen worldbench MLflow run, one row per (row, group, metric)."""
    if mlflow_uri is None:
        st.caption("Behaviour metrics are read from MLflow; no MLflow database is configured (--mlflow-uri).")
        return
    from envace_dashboard import mlflow_data as md

    scored = [r for r in md.runs(mlflow_uri)
              if r.tags.get("envace.kind") == "worldbench" and wd.behaviour_rows(r.metrics)]
    if not scored:
        st.caption("No behaviour metrics logged yet (`envace worldbench score ... act_checkpoint=DIR behr=true "
                   "env_nll=true wm2real=true`, or judge.base_url=URL judge.model=NAME).")
        return
    st.subheader("Behaviour metrics")
    pick = st.selectbox("Scoring run", range(len(scored)), format_func=lambda i: scored[i].label,
                        key="wb_behaviour_run")
    st.dataframe(pd.DataFrame(wd.behaviour_rows(scored[pick].metrics)), hide_index=True, key="wb_behaviour")
    st.caption("value: mean; lo / hi: 95 % bootstrap over transitions (tasks for WM2Real); seed_lo / seed_hi: "
               "Student t over sampling seeds, when several were given. BehR Δ in nats (0: the prediction moves "
               "the Act policy as the real response does); rubric dimensions rescaled to [0, 1].")


s = settings()
store = require_store(s)
st.title("Worldbench")
behaviour_section(s.mlflow_uri)
found = wd.runs(store)
if not found:
    st.info("No worldbench scores in this store yet (run `envace worldbench score ... tracking.store_url=<store>`).")
    st.stop()
names = dict(found)
run_id = st.selectbox("Scored row", list(names), format_func=lambda i: names[i], key="wb_run")
sources, tools = wd.facets(store, run_id)
c1, c2, c3 = st.columns(3)
source = optional(c1.selectbox("Source", ["(any)", *sources], key="wb_source"))
tool = optional(c2.selectbox("Tool", ["(any)", *tools], key="wb_tool"))
lo, hi = c3.slider("Leaf F1", 0.0, 1.0, (0.0, 1.0), step=0.05, key="wb_f1")
rows = wd.pairs(store, run_id, source, tool, float(lo), float(hi), 500)
if not rows:
    st.caption("No transitions match these filters.")
    st.stop()
table = pd.DataFrame([{"transition": p.transition, "source": p.source, "tool": p.tool, "kind": p.kind,
                       "json_valid": p.json_valid, "exact": p.exact, "shape": p.shape, "leaf_f1": round(p.leaf_f1, 3),
                       "real_error": p.real_error, "pred_error": p.pred_error} for p in rows])
st.caption(f"{len(rows)} transitions (at most 500 shown); exact {table['exact'].mean():.3f}, "
           f"leaf F1 {table['leaf_f1'].mean():.3f}")
st.dataframe(table, hide_index=True, key="wb_table")
pick = st.selectbox("Transition", range(len(rows)), format_func=lambda i: rows[i].transition, key="wb_pick")
p = rows[pick]
st.text(f"call: {json.dumps(p.call, ensure_ascii=False)}")
left, right = st.columns(2)
left.subheader("Predicted")
left.code(json.dumps(p.predicted, indent=2, ensure_ascii=False) if p.predicted is not None
          else (p.predicted_text or "(nothing)"), language="json")
right.subheader("Real")
right.code(json.dumps(p.real, indent=2, ensure_ascii=False), language="json")
