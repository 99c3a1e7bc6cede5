"""Streamlit rendering of one stored trajectory: summary numbers, the Act | Rehearse | Real timeline, the
per-row role / advantage / token table, the reward and checklist breakdown, and fidelity scores.

Trajectory text is untrusted model output: it is only ever shown through `st.code`, `st.text`,
`st.dataframe` or `st.json`, which render it as text. Markdown-rendering calls (`st.markdown`,
`st.caption`, widget labels) only ever receive our own strings and numbers.
"""

from __future__ import annotations

import pandas as pd
import streamlit as st

from envace.store.records import TrajectoryRecord, TurnRecord
from envace_dashboard.timeline import (
    ActBlock,
    CallRow,
    OtherBlock,
    UserBlock,
    checklist_rows,
    pretty,
    pretty_call,
    timeline,
    tokens_by_role,
    turn_rows,
)

COLUMNS = ("Act", "Rehearse", "Real environment")


def _num(x: float | None, fmt: str = "{:.3f}") -> str:
    return "—" if x is None else fmt.format(x)


def _turn_caption(t: TurnRecord) -> str:
    adv = "" if t.advantage is None else f" · advantage {t.advantage:+.3f}"
    return f"{t.role.value} · turn {t.turn_index} · user turn {t.user_turn} · {t.n_tokens} tokens{adv}"


def render_summary(rec: TrajectoryRecord) -> None:
    s = rec.summary
    st.subheader(f"Trajectory #{s.id}")
    meta = {"run": s.run_id, "step": s.step, "split": s.split, "mode": s.mode.value,
            "rollout mode": s.rollout_mode.value, "prompt": s.prompt_id, "prompt index": s.prompt_index,
            "sample": s.sample_index, "domain": s.domain,
            "termination": s.termination.value if s.termination else None}
    st.dataframe(pd.DataFrame([meta]), hide_index=True)
    tok = tokens_by_role(rec)
    c = st.columns(6)
    c[0].metric("Reward", _num(s.reward))
    c[1].metric("Generations", s.n_turns)
    c[2].metric("Tool calls", s.n_tool_calls)
    c[3].metric("Env calls", s.env_calls)
    c[4].metric("Act tokens", tok.get("act", 0))
    c[5].metric("Rehearse tokens", tok.get("rehearse", 0))


def _act_cell(act: TurnRecord | None, row: CallRow | None, j: int) -> None:
    if act is not None and j == 0:
        st.caption(_turn_caption(act))
        st.code(act.text, language=None, wrap_lines=True)
        if act.parse_error is not None:
            st.error(f"Act output rejected: {act.parse_error.value}")
    if row is not None and row.call is not None:
        st.caption(f"tool call {j + 1}")
        st.code(pretty_call(row.call), language="json", wrap_lines=True)


def _rehearse_cell(row: CallRow | None) -> None:
    if row is None:
        st.caption("—")
        return
    if row.answer is None:
        st.caption("not answered (the episode ended first)")
        return
    st.caption(_turn_caption(row.answer))
    st.code(row.answer.text, language=None, wrap_lines=True)
    if row.answer.parse_error is not None:
        st.error(f"rehearsed result rejected: {row.answer.parse_error.value}")


def _real_cell(row: CallRow | None) -> None:
    if row is None or not row.has_real:
        st.caption("no real response recorded")
        return
    st.code(pretty(row.real_value), language="json", wrap_lines=True)
    diff = row.diff
    if diff:
        st.caption("rehearsed → real")
        st.code(diff, language="diff", wrap_lines=True)
    else:
        st.success("rehearsed result matches the real one")
    f = row.fidelity
    if f is not None:
        st.caption(f"exact match {f.exact_match} · JSON valid {f.json_valid} · schema ok {f.schema_ok} · "
                   f"field F1 {f.field_f1:.2f}")


def _act_block(block: ActBlock, b: int) -> None:
    with st.container(border=True, key=f"step-{b}"):
        rows: list[CallRow | None] = list(block.rows) or [None]
        for j, row in enumerate(rows):
            cols = st.columns(3)
            with cols[0], st.container(key=f"act-{b}-{j}"):
                _act_cell(block.act, row, j)
            with cols[1], st.container(key=f"rehearse-{b}-{j}"):
                _rehearse_cell(row)
            with cols[2], st.container(key=f"real-{b}-{j}"):
                _real_cell(row)


def render_timeline(rec: TrajectoryRecord) -> None:
    head = st.columns(3)
    for col, title in zip(head, COLUMNS):
        col.markdown(f"**{title}**")
    for b, block in enumerate(timeline(rec)):
        if isinstance(block, UserBlock):
            with st.container(key=f"user-{b}"):
                st.caption(f"user · user turn {block.turn.user_turn}")
                st.text(block.turn.text)
        elif isinstance(block, ActBlock):
            _act_block(block, b)
        elif isinstance(block, OtherBlock):
            st.caption(_turn_caption(block.turn))
            st.text(block.turn.text)


def render_trajectory(rec: TrajectoryRecord) -> None:
    render_summary(rec)
    tabs = st.tabs(["Timeline", "Rows: role · advantage · tokens", "Reward & checklist", "Fidelity"])
    with tabs[0]:
        render_timeline(rec)
    with tabs[1]:
        st.dataframe(pd.DataFrame(turn_rows(rec)), hide_index=True)
        st.dataframe(pd.DataFrame([tokens_by_role(rec)]), hide_index=True)
    with tabs[2]:
        st.metric("Reward", _num(rec.summary.reward))
        items = checklist_rows(rec)
        if items:
            st.dataframe(pd.DataFrame(items), hide_index=True)
        else:
            st.caption("no checklist items stored")
        if rec.reward_breakdown:
            st.json(rec.reward_breakdown)
    with tabs[3]:
        if rec.fidelity_pairs:
            st.dataframe(pd.DataFrame([{"turn": p.turn_index, "tool": p.tool_name, "JSON valid": p.json_valid,
                                        "schema ok": p.schema_ok, "exact match": p.exact_match,
                                        "field F1": p.field_f1} for p in rec.fidelity_pairs]), hide_index=True)
        else:
            st.caption("no rehearsed-vs-real pairs in this trajectory")
