"""Streamlit rendering of test-time rehearsal on the trajectory page: for a committed execution (mode
tts-commit) its N, mode and attempt, the rehearsal memory m_x, its private rehearsals (one row each, and
each one's imagined calls), and every really executed call with the responses the rehearsals imagined for
the same call beside the real one; for a private rehearsal, the committed execution it belongs to.
Reads through envace.store.tts_query; model text is shown only through st.code / st.dataframe.
"""

from __future__ import annotations

import pandas as pd
import streamlit as st

from envace.store import query as q
from envace.store import tts_query as tq
from envace.store.models import TrajectoryMode
from envace.store.records import TrajectoryRecord
from envace.types import ToolCall
from envace_dashboard.store_data import TTL_S, session
from envace_dashboard.timeline import pretty, pretty_call
from envace_dashboard.tts_view import comparisons, rehearsal_rows


@st.cache_data(ttl=TTL_S, show_spinner=False)
def _commit(store: str, trajectory_id: int) -> tuple[tq.TTSCommitRecord | None, list, list]:
    with session(store) as s:
        rec = tq.tts_commit(s, trajectory_id)
        links = tq.tts_rehearsals(s, trajectory_id) if rec is not None else []
        return rec, links, [q.get_trajectory(s, p.trajectory_id) for p in links]


@st.cache_data(ttl=TTL_S, show_spinner=False)
def _commit_of(store: str, trajectory_id: int) -> int | None:
    with session(store) as s:
        return tq.commit_of(s, trajectory_id)


def render_tts(store: str, rec: TrajectoryRecord) -> None:
    mode = rec.summary.mode
    if mode is TrajectoryMode.TTS_PRIVATE:
        commit_id = _commit_of(store, rec.summary.id)
        with st.container(key="tts-private-link"):
            st.subheader("Test-time rehearsal")
            st.caption("This is a private rehearsal: imagined by the policy, nothing was executed. "
                       + (f"Its committed execution is trajectory #{commit_id}." if commit_id else
                          "Its committed execution is not stored."))
        return
    if mode is not TrajectoryMode.TTS_COMMIT:
        return
    commit, links, privates = _commit(store, rec.summary.id)
    if commit is None:
        return
    st.divider()
    st.subheader("Test-time rehearsal")
    st.caption(f"N = {commit.n} private rehearsals · {commit.tts_mode} · attempt {commit.attempt} · "
               f"rehearsed at {'every user message' if commit.rehearse_at == 'every' else 'the first user message'}")
    with st.container(key="tts-memory"):
        st.markdown("**Rehearsal memory m_x** (in the committed run's system prompt)")
        st.code(commit.memory or "(empty)", language=None, wrap_lines=True)
    with st.container(key="tts-rehearsals"):
        st.markdown(f"**Private rehearsals** ({len(links)})")
        if links:
            st.dataframe(pd.DataFrame(rehearsal_rows(links)), hide_index=True, key="tts-rehearsal-table")
    rows = comparisons(commit, [(link, p) for link, p in zip(links, privates) if p is not None])
    st.markdown("**Executed calls: real response beside the imagined ones**")
    if not rows:
        st.caption("the committed run executed no call")
    head = st.columns(3)
    for col, title in zip(head, ("Committed call", "Real environment", "Imagined in private rehearsals")):
        col.markdown(f"**{title}**")
    for i, row in enumerate(rows):
        cols = st.columns(3)
        with cols[0], st.container(key=f"tts-call-{i}"):
            st.caption(f"user turn {row.user_turn}")
            st.code(pretty_call(ToolCall(row.name, row.arguments)), language="json", wrap_lines=True)
        with cols[1], st.container(key=f"tts-real-{i}"):
            st.code(pretty(row.real), language="json", wrap_lines=True)
        with cols[2], st.container(key=f"tts-imagined-{i}"):
            if not row.imagined:
                st.caption("no rehearsal made this call")
            for im in row.imagined:
                st.caption(f"rehearsal {im.rehearsal_index + 1} "
                           f"(user turn {im.user_turn}, trajectory #{im.trajectory_id})")
                st.code(pretty(im.value), language="json", wrap_lines=True)
