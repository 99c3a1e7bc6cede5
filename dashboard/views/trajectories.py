"""Trajectories: filter one run's trajectories (benchmark, step range, split, mode, reward range, role,
termination, text), page through them (the store returns one page; a run is never loaded whole) and open
one: a tool-world trajectory as a timeline with Act | Rehearse | Real side by side, a benchmark trajectory
(BFCL, τ², VitaBench, FinMCP) as its message list with its score and error (dashboard.bench_render).
The benchmark filter narrows the runs offered to those holding that benchmark's trajectories.

Deep links: `?run=<run id>&traj=<trajectory id>` open a run and a trajectory; the page keeps them updated.
"""

from __future__ import annotations

import pandas as pd
import streamlit as st

from envace.store.models import TrajectoryMode
from envace.types import Role, TerminationReason
from envace_dashboard import store_data as sd
from envace_dashboard.bench_render import render_benchmark_trajectory
from envace_dashboard.common import ANY, literal, optional, require_store, settings
from envace_dashboard.render import render_trajectory
from envace_dashboard.tts_render import render_tts

MAX_TRAJ_ID = 2**53 - 1  # the largest id a browser number field holds exactly (store ids are far below)
SORTS = {"step ↑": "step", "step ↓": "-step", "reward ↑": "reward", "reward ↓": "-reward",
         "generations ↓": "-n_turns", "id ↑": "id"}
PAGE_SIZES = [25, 50, 100, 200]
WORLD = "(tool world / training)"  # benchmark '' in the store

store = require_store(settings())
st.title("Trajectories")
runs = sd.run_choices(store)
if not runs:
    st.info("No runs in the store yet: train or evaluate something first (e.g. `envace demo`).")
    st.stop()
bar = st.sidebar
stored = sd.benchmarks(store)
benchmark = bar.selectbox("Benchmark", [ANY, WORLD, *stored], key="benchmark",
                          help="Evaluation trajectories of one benchmark (its runs only), or the tool world's") \
    if stored else ANY
bench_filter = None if benchmark == ANY else ("" if benchmark == WORLD else benchmark)
if bench_filter:  # a benchmark's own runs (the tool world / training filter keeps every run: most hold it)
    holding = set(sd.benchmark_run_ids(store, bench_filter))
    runs = [r for r in runs if r.id in holding]
    if not runs:
        st.info("No run among the newest holds trajectories of this benchmark.")
        st.stop()
labels = {r.id: f"{r.name or r.id} · {r.kind.value} · {r.status.value} · {r.id}" for r in runs}
ids = [r.id for r in runs]
qp = st.query_params
if "run" not in st.session_state:
    st.session_state.run = qp.get("run") if qp.get("run") in labels else ids[0]
elif st.session_state.run not in labels:  # the benchmark filter left the chosen run out
    st.session_state.run = ids[0]

run_id = bar.selectbox("Run", ids, format_func=labels.get, key="run")
first, last = sd.step_bounds(store, run_id)  # index probes: no scan of the run (see dashboard_queries)
if first is None:
    st.info("This run has no stored trajectories yet.")
    st.stop()
step_min = bar.number_input("Step from", min_value=first, max_value=last, value=first, step=1, key=f"smin-{run_id}")
step_max = bar.number_input("Step to", min_value=first, max_value=last, value=last, step=1, key=f"smax-{run_id}")
splits = sd.run_splits(store, run_id)
split = bar.selectbox("Split", [ANY, *splits], key="split")
mode = bar.selectbox("Mode", [ANY, *[m.value for m in TrajectoryMode]], key="mode",
                     help="train / eval / tts-private (a test-time rehearsal) / tts-commit (the real execution)")
reward_min = bar.number_input("Reward at least", value=None, format="%.4f", key="reward_min")
reward_max = bar.number_input("Reward at most", value=None, format="%.4f", key="reward_max")
role = bar.selectbox("Has a turn of role", [ANY, *[r.value for r in Role]], key="role")
termination = bar.selectbox("Termination", [ANY, *[t.value for t in TerminationReason]], key="termination")
text = bar.text_input("Text contains", key="text", help="Case-insensitive substring of any turn's text "
                      "(a scan of the run's turns: slower than the other filters on large runs)")
sort = bar.selectbox("Sort", list(SORTS), key="sort")
page_size = bar.selectbox("Rows per page", PAGE_SIZES, index=1, key="page_size")

spec = sd.FilterSpec(run_id=run_id, step_min=int(step_min), step_max=int(step_max), split=optional(split),
                     mode=optional(mode), reward_min=reward_min, reward_max=reward_max, role=optional(role),
                     termination=optional(termination), text=text.strip() or None, benchmark=bench_filter)
page = st.number_input("Page", min_value=1, value=1, step=1, key=f"page-{hash((spec, sort, page_size))}")
try:
    pg = sd.trajectories_page(store, spec, SORTS[sort], int(page), int(page_size))
except ValueError as exc:
    st.error(str(exc))
    st.stop()
more = "" if pg.total_exact else "+"
st.caption(f"{pg.total}{more} matching trajectories · page {pg.page} of {pg.n_pages}{more} · "
           f"{len(pg.items)} shown")
rows = [{"id": t.id, "step": t.step, "split": t.split, "mode": t.mode.value, "rollout": t.rollout_mode.value,
         "prompt": t.prompt_id, "sample": t.sample_index, "domain": t.domain, "reward": t.reward,
         "termination": t.termination.value if t.termination else None, "generations": t.n_turns,
         "tool calls": t.n_tool_calls, "env calls": t.env_calls} for t in pg.items]
if any(t.benchmark for t in pg.items):  # benchmark trajectories: which benchmark, and a task's error
    for row, t in zip(rows, pg.items):
        row.update({"benchmark": t.benchmark, "error": t.error})
page_ids = [t.id for t in pg.items]


def _open_selected() -> None:
    sel = st.session_state["traj_table"].selection.rows
    if sel and sel[0] < len(page_ids):
        st.session_state.open_id = page_ids[sel[0]]


if rows:
    st.dataframe(pd.DataFrame(rows), hide_index=True, key="traj_table", on_select=_open_selected,
                 selection_mode="single-row")
else:
    st.info("No trajectory matches these filters on this page.")

if "open_id" not in st.session_state:
    traj_qp = qp.get("traj", "")
    fallback = page_ids[0] if page_ids else 1
    if traj_qp and not (traj_qp.isascii() and traj_qp.isdigit() and 1 <= int(traj_qp) <= MAX_TRAJ_ID):
        st.warning(f"?traj={literal(traj_qp[:40])} is not a trajectory id (1 to {MAX_TRAJ_ID}); showing #{fallback}.")
        traj_qp = ""
    st.session_state.open_id = int(traj_qp) if traj_qp else fallback
open_id = st.number_input("Open trajectory #", min_value=1, max_value=MAX_TRAJ_ID, step=1, key="open_id",
                          help="Select a row above, or type any trajectory id")
st.query_params.update({"run": run_id, "traj": str(int(open_id))})
st.divider()
bench = sd.benchmark_trajectory(store, int(open_id))
if bench is not None:
    render_benchmark_trajectory(bench)
    st.stop()
rec = sd.trajectory(store, int(open_id))
if rec is None:
    st.warning(f"No trajectory #{int(open_id)} in the store.")
    st.stop()
render_trajectory(rec)
render_tts(store, rec)  # a committed test-time-rehearsal run: its private rehearsals and memory
