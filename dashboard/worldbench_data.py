"""Cached store reads for the Worldbench page (through envace.store.worldbench_rows only), and the table of
a worldbench MLflow run's behaviour metrics (`behaviour_rows`, read from the run's metrics)."""

from __future__ import annotations

import streamlit as st

from envace.store import worldbench_rows as wr
from envace_dashboard.store_data import TTL_S, session


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


BEHAVIOUR_PREFIXES = ("behr_", "env_nll", "wm2real_", "rubric_")
BOUNDS = ("_seed_lo", "_seed_hi", "_lo", "_hi", "_n")  # suffixes of a metric's bounds (longest first)


def behaviour_rows(metrics: dict[str, float]) -> list[dict[str, object]]:
    """The behaviour metrics of one `envace worldbench score` MLflow run as table rows: one per
    (row, group, metric) with its value, bootstrap bounds (lo, hi), seed-level bounds and n, keys as
    envace.worldbench.behaviour.flat writes them (`<row>/<group>/<metric>[<bound>]`)."""
    table: dict[tuple[str, str, str], dict[str, object]] = {}
    for key, value in metrics.items():
        parts = key.split("/")
        if len(parts) != 3 or not parts[2].startswith(BEHAVIOUR_PREFIXES):
            continue
        row, group, name = parts
        bound = next((b for b in BOUNDS if name.endswith(b)), "")
        metric = name[: len(name) - len(bound)] if bound else name
        cell = table.setdefault((row, group, metric), {"row": row, "group": group, "metric": metric, "value": None,
                                                       "lo": None, "hi": None, "seed_lo": None, "seed_hi": None,
                                                       "n": None})
        cell[bound.lstrip("_") or "value"] = float(value)
    return [table[k] for k in sorted(table)]
