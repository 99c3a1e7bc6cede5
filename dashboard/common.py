"""What every page starts with: the settings, and a guard that stops the page with a clear message when
the store or the MLflow database it needs is missing (instead of a traceback in the browser)."""

from __future__ import annotations

import streamlit as st

from envace_dashboard.settings import Settings, load_settings, store_path


def settings() -> Settings:
    return load_settings()


def require_store(s: Settings) -> str:
    """The store location, or stop the page: a missing SQLite file is reported, never created; a store
    that cannot be opened (bad URL, database down, missing driver) is one line without a traceback."""
    path = store_path(s.store)
    if path is not None and not path.is_file():
        st.error(f"Trajectory store {path} does not exist. Start the dashboard with --store pointing at a run's "
                 f"store.db (e.g. runs/demo/store.db after `envace demo`) or a database URL.")
        st.stop()
    from envace_dashboard.store_data import store_problem

    problem = store_problem(s.store)
    if problem is not None:
        st.error(problem)
        st.stop()
    return s.store


def require_mlflow(s: Settings, what: str) -> str:
    if s.mlflow_uri is None:
        st.info(f"{what} come from MLflow, and no MLflow database is configured: {s.mlflow_error}")
        st.stop()
    return s.mlflow_uri


def optional(value: str) -> str | None:
    """Selectbox value "(any)" → None."""
    return None if value == ANY else value


ANY = "(any)"


_MARKDOWN = "\\`*_[]()<>!|~$#:."


def literal(text: str) -> str:
    """`text` for a Streamlit markdown element (warning, info, caption) as plain characters: every markdown
    metacharacter backslash-escaped, so user input (a query parameter) cannot become a link or markup."""
    return "".join("\\" + c if c in _MARKDOWN else c for c in text)
