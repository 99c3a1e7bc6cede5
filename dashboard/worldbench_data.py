"""Cached store reads for the Worldbench page (through envace.store.worldbench_rows only)."""

from __future__ import annotations

import streamlit as st

from dashboard.store_data import TTL_S, session
from envace.store import worldbench_rows as wr


@st.cache_data(ttl=TTL_S, show_spinner=False)
def runs(store: str) -> list[tuple[str, str]]:
    with session(store) as s:
        return wr.worldbench_runs(s)


@st.cache_data(ttl=TTL_S, show_spinner=False)
def facets(store: str, run_id: str) -> tuple[list[str], list[str]]:
    with session(store) as s:
        return wr.worldbench_facets(s, run_id)


@st.cache_data(ttl=TTL_S, show_spinner=False)
def pairs(store: str, run_id: str, source: str | None, tool: str | None, min_f1: float, max_f1: float,
          limit: int) -> list[wr.WorldbenchPair]:
    with session(store) as s:
        return wr.worldbench_pairs(s, run_id, source=source, tool=tool, min_f1=min_f1, max_f1=max_f1, limit=limit)
