"""Streamlit rendering of one benchmark trajectory (BFCL, τ², VitaBench, FinMCP): the task, attempt, seed,
score and error, then the conversation as the benchmark ran it, one box per message in order (system,
user or user simulator, the policy's replies with their tool calls, tool results, the judge's prompt and
verdict), and the benchmark's own per-task record.

Everything stored is benchmark data or model output: it is shown through `st.code`, `st.text`,
`st.dataframe` or `st.json` only; captions and labels hold our own strings and numbers.
"""

from __future__ import annotations

import json

import pandas as pd
import streamlit as st

from envace.store.benchmark_query import BenchMessage, BenchTrajectory
from envace.types import Role

LABELS = {Role.SYSTEM: "system", Role.USER: "user", Role.ACT: "policy", Role.ENV: "tool result",
          Role.JUDGE: "judge", Role.REHEARSE: "rehearse"}
JUDGE_ROLES = {"system": "prompt (system)", "user": "prompt", "assistant": "verdict"}


def _caption(m: BenchMessage, i: int) -> str:
    label = LABELS.get(m.role, "message")
    if m.role is Role.JUDGE and m.observation:
        label += f" · {JUDGE_ROLES.get(str(m.observation.get('judge_role')), 'message')}"
    calls = f" · {len(m.tool_calls)} tool call{'s' * (len(m.tool_calls) != 1)}" if m.tool_calls else ""
    return f"{i} · {label} · user turn {m.user_turn}{calls}"


def render_message(m: BenchMessage, i: int) -> None:
    with st.container(border=True, key=f"bench-msg-{i}"):
        st.caption(_caption(m, i))
        if m.text:
            st.code(m.text, language=None, wrap_lines=True)
        for call in m.tool_calls:
            st.code(json.dumps(call, indent=2, ensure_ascii=False, default=str), language="json", wrap_lines=True)
        if m.role is Role.ENV and m.observation and m.observation.get("tool_call_id"):
            st.text(f"answers call {m.observation['tool_call_id']}")


def render_benchmark_trajectory(t: BenchTrajectory) -> None:
    st.subheader(f"Trajectory #{t.id} · {t.benchmark}")
    meta = {"run": t.run_id, "benchmark": t.benchmark, "set": t.set, "task": t.task_id, "attempt": t.attempt,
            "seed": t.seed, "score": t.score, "error": t.error}
    st.dataframe(pd.DataFrame([meta]), hide_index=True)
    counts = {r: sum(m.role is r for m in t.messages) for r in (Role.ACT, Role.ENV, Role.JUDGE)}
    c = st.columns(4)
    c[0].metric("Score", "—" if t.score is None else f"{t.score:.3f}")
    c[1].metric("Policy replies", counts[Role.ACT])
    c[2].metric("Tool results", counts[Role.ENV])
    c[3].metric("Judge messages", counts[Role.JUDGE])
    if t.error:
        st.error("This task failed before it could be scored; it counts as a failure (score 0). Its error:")
        st.code(t.error, language=None, wrap_lines=True)
    tabs = st.tabs(["Messages", "Per-task record"])
    with tabs[0]:
        if not t.messages:
            st.caption("no messages stored for this task")
        for i, m in enumerate(t.messages):
            render_message(m, i)
    with tabs[1]:
        st.json(t.record)
