"""Where the dashboard reads from: the trajectory store and the MLflow tracking URI.

Given as `streamlit run dashboard/app.py -- --store PATH_OR_URL --mlflow-uri URI` or through the
environment (`ENVACE_DASHBOARD_STORE`, `ENVACE_DASHBOARD_MLFLOW_URI`); the command line wins. The launcher
(`envace.dashboard_launch`) sets both.

The dashboard never creates anything: an MLflow URI naming a SQLite file that does not exist is reported,
not created (MlflowClient would create and migrate an empty database). With no URI given, the MLflow
database is looked for where the trainer and the demo put it, next to the store.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass
from pathlib import Path

ENV_STORE = "ENVACE_DASHBOARD_STORE"
ENV_MLFLOW = "ENVACE_DASHBOARD_MLFLOW_URI"
DEFAULT_STORE = "runs/demo/store.db"


@dataclass(frozen=True)
class Settings:
    store: str  # a file path or a SQLAlchemy URL
    mlflow_uri: str | None  # None: no MLflow database found (pages that need it say so)
    mlflow_error: str | None = None  # why `mlflow_uri` is None when one was asked for


def _argv_options(argv: list[str]) -> tuple[str | None, str | None]:
    p = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    p.add_argument("--store")
    p.add_argument("--mlflow-uri")
    ns, _ = p.parse_known_args(argv)
    return ns.store, ns.mlflow_uri


def _is_url(text: str) -> bool:
    return "://" in text or text.startswith("databricks")


def store_path(store: str) -> Path | None:
    """The SQLite file of a store location, or None for a server URL."""
    if not _is_url(store):
        return Path(store).expanduser().resolve()
    if store.startswith("sqlite:///"):
        return Path(store[len("sqlite:///"):]).expanduser().resolve()
    return None


def resolve_mlflow_uri(uri: str | None, store: str) -> tuple[str | None, str | None]:
    """(tracking URI, error). A directory or `.db` path becomes a `sqlite:///` URI of an EXISTING file."""
    if uri:
        if _is_url(uri) and not uri.startswith("sqlite:///"):
            return uri, None  # http(s)://, postgresql://, databricks: nothing local to check
        path = Path(uri[len("sqlite:///"):] if uri.startswith("sqlite:///") else uri).expanduser().resolve()
        db = path / "mlflow.db" if path.is_dir() else path
        if db.is_file():
            return f"sqlite:///{db}", None
        return None, (f"MLflow database {db} does not exist; pass --mlflow-uri with the tracking URI the "
                      f"runs were logged to (a sqlite:/// URI, a directory holding mlflow.db, or a server URL)")
    from envace.tracking.locations import default_mlflow_files

    candidates = []
    sp = store_path(store)
    if sp is not None:
        group, job, beside = default_mlflow_files(sp.parent)  # where envace's commands log (envace.tracking.locations)
        candidates += [group, job, sp.parent / "mlruns" / "mlflow.db", beside]
    candidates.append(Path("mlruns").resolve() / "mlflow.db")
    for c in candidates:
        if c.is_file():
            return f"sqlite:///{c}", None
    return None, ("no MLflow database found next to the store (looked for " + ", ".join(str(c) for c in candidates)
                  + "); start the dashboard with --mlflow-uri")


def load_settings(argv: list[str] | None = None, environ: dict[str, str] | None = None) -> Settings:
    env = os.environ if environ is None else environ
    a_store, a_uri = _argv_options(sys.argv[1:] if argv is None else argv)
    store = a_store or env.get(ENV_STORE) or DEFAULT_STORE
    uri, err = resolve_mlflow_uri(a_uri or env.get(ENV_MLFLOW) or None, store)
    return Settings(store=store, mlflow_uri=uri, mlflow_error=err)
