"""Cached reads of the trajectory store for the pages, through `envace.store.query` only.

One read-only engine per store location lives for the server's lifetime (`st.cache_resource`); each read
opens a short session on it. Results are plain dataclasses (envace.store.records), cached for a few
seconds so reruns of a page (every widget change is one) do not repeat queries, while a live run still
shows new steps. Every list is one page: nothing here loads a whole run.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import streamlit as st
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from envace.fidelity import ToolFidelity
from envace.store import benchmark_query as bq
from envace.store import dashboard_queries as dq
from envace.store import query as q
from envace.store.records import Page, RoleStats, RunRecord, RunSummary, TrajectoryRecord, TrajectorySummary
from envace.store.session import make_engine

TTL_S = 10  # seconds a cached answer is reused (a live run's new steps appear after at most this)
RUN_LIST_LIMIT = 1000  # runs offered in selectors (newest first); the Runs page pages through all


@st.cache_resource(show_spinner=False)
def _engine(store: str) -> Engine:
    return make_engine(store, read_only=True)


@st.cache_data(ttl=TTL_S, show_spinner=False)
def store_problem(store: str) -> str | None:
    """None when the store answers a trivial query, else one line for the page: the error class and its
    first line, the URL's password masked, never a traceback (which would show server paths)."""
    from envace.secrets import mask_text
    from envace.store.session import StoreSchemaError, check_revision

    try:
        with _engine(store).connect() as conn:
            conn.exec_driver_sql("SELECT 1")
        check_revision(_engine(store), allow_older=False, label=store)  # an old or newer schema: the fix
    except StoreSchemaError as exc:
        return mask_text(str(exc))
    except Exception as exc:  # noqa: BLE001 - any failure here means "cannot open", shown as one line
        orig = getattr(exc, "orig", None) or exc
        first = (str(orig).strip().splitlines() or [""])[0]
        return mask_text(f"Cannot open the trajectory store {store}: {type(orig).__name__}: {first}. Start the "
                         f"database or restart the dashboard with --store pointing at a store.db or a working "
                         f"database URL.")
    return None


@contextmanager
def session(store: str) -> Iterator[Session]:
    """A read-only session (SQLite opened `mode=ro`; PostgreSQL in read-only transactions)."""
    with Session(_engine(store)) as s:
        yield s


@dataclass(frozen=True)
class FilterSpec:
    """The trajectory page's filter as hashable primitives (the cache key); see `TrajectoryFilter`."""

    run_id: str | None = None
    step_min: int | None = None
    step_max: int | None = None
    split: str | None = None
    mode: str | None = None
    reward_min: float | None = None
    reward_max: float | None = None
    role: str | None = None
    termination: str | None = None
    text: str | None = None
    benchmark: str | None = None  # "" = the tool world / training

    def to_filter(self) -> q.TrajectoryFilter:
        """Raises ValueError naming the field (e.g. a step range given backwards)."""
        return q.TrajectoryFilter(run_id=self.run_id, step_min=self.step_min, step_max=self.step_max,
                                  split=self.split, mode=self.mode, reward_min=self.reward_min,
                                  reward_max=self.reward_max, role=self.role, termination=self.termination,
                                  text=self.text or None, benchmark=self.benchmark)


@st.cache_data(ttl=TTL_S, show_spinner=False)
def runs_page(store: str, page: int = 1, page_size: int = 50) -> Page[RunRecord]:
    with session(store) as s:
        return q.list_runs(s, page=page, page_size=page_size)


@st.cache_data(ttl=TTL_S, show_spinner=False)
def run_choices(store: str) -> list[RunRecord]:
    """The newest runs (for selectors)."""
    with session(store) as s:
        return q.list_runs(s, page=1, page_size=RUN_LIST_LIMIT).items


@st.cache_data(ttl=TTL_S, show_spinner=False)
def run_summary(store: str, run_id: str) -> RunSummary | None:
    with session(store) as s:
        return q.run_summary(s, run_id)


@st.cache_data(ttl=TTL_S, show_spinner=False)
def step_bounds(store: str, run_id: str) -> tuple[int | None, int | None]:
    with session(store) as s:
        return dq.step_bounds(s, run_id)


@st.cache_data(ttl=TTL_S, show_spinner=False)
def run_splits(store: str, run_id: str) -> list[str]:
    with session(store) as s:
        return dq.run_splits(s, run_id)


@st.cache_data(ttl=TTL_S, show_spinner=False)
def trajectories_page(store: str, spec: FilterSpec, sort: str, page: int,
                      page_size: int) -> Page[TrajectorySummary]:
    with session(store) as s:
        return q.list_trajectories(s, spec.to_filter(), sort=sort, page=page, page_size=page_size)


@st.cache_data(ttl=300, show_spinner=False, max_entries=256)
def trajectory(store: str, trajectory_id: int) -> TrajectoryRecord | None:
    """A stored trajectory never changes (the writer only inserts), so it is cached longer."""
    with session(store) as s:
        return q.get_trajectory(s, trajectory_id)


@st.cache_data(ttl=TTL_S, show_spinner=False)
def role_stats(store: str, run_id: str, step_min: int | None, step_max: int | None) -> list[RoleStats]:
    with session(store) as s:
        return q.role_stats(s, q.TrajectoryFilter(run_id=run_id, step_min=step_min, step_max=step_max))


@st.cache_data(ttl=TTL_S, show_spinner=False)
def fidelity_by_tool(store: str, run_id: str, step_min: int | None, step_max: int | None) -> list[ToolFidelity]:
    with session(store) as s:
        return q.fidelity_by_tool(s, run_id, step_min=step_min, step_max=step_max)


@st.cache_data(ttl=TTL_S, show_spinner=False)
def benchmarks(store: str) -> list[str]:
    """Benchmarks with trajectories in the store (BFCL, τ², VitaBench, FinMCP evaluations)."""
    with session(store) as s:
        return bq.stored_benchmarks(s)


@st.cache_data(ttl=TTL_S, show_spinner=False)
def benchmark_run_ids(store: str, benchmark: str) -> list[str]:
    with session(store) as s:
        return bq.benchmark_run_ids(s, benchmark)


@st.cache_data(ttl=300, show_spinner=False, max_entries=256)
def benchmark_trajectory(store: str, trajectory_id: int) -> bq.BenchTrajectory | None:
    """A benchmark trajectory with its messages (None for a tool-world one); never changes once stored."""
    with session(store) as s:
        return bq.benchmark_trajectory(s, trajectory_id)
