"""Cached reads of MLflow for the pages: runs, metric histories and the artifacts other flows log
(`sweep/results.csv`, `tts/results.csv`, `benchmarks/report.json`).

Everything goes through an explicit `MlflowClient` on the configured URI (never the fluent API's global
tracking URI, which would fall back to `./mlruns`). Artifacts are downloaded into a temporary directory
that is removed right after reading. Runs are searched newest first, at most `MAX_RUNS`.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import streamlit as st

os.environ.setdefault("MLFLOW_ENABLE_TELEMETRY", "false")
os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")  # keeps the server log readable

TTL_S = 15
MAX_RUNS = 500
PARENT_TAG = "mlflow.parentRunId"


@dataclass
class MlRun:
    run_id: str
    name: str
    experiment: str
    status: str
    start_time: int | None  # ms since the epoch
    parent_id: str | None
    params: dict[str, str] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)  # latest value per key
    tags: dict[str, str] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return f"{self.name or '(unnamed)'} · {self.experiment} · {self.run_id[:8]}"


@st.cache_resource(show_spinner=False)
def client(uri: str):  # -> mlflow.tracking.MlflowClient
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=uri, registry_uri=uri)


@st.cache_data(ttl=TTL_S, show_spinner=False)
def runs(uri: str, max_results: int = MAX_RUNS) -> list[MlRun]:
    """All runs of every active experiment, newest first."""
    c = client(uri)
    exps = {e.experiment_id: e.name for e in c.search_experiments()}
    if not exps:
        return []
    found = c.search_runs(list(exps), max_results=max_results, order_by=["attributes.start_time DESC"])
    out = []
    for r in found:
        tags = dict(r.data.tags)
        out.append(MlRun(run_id=r.info.run_id, name=r.info.run_name or tags.get("mlflow.runName", ""),
                         experiment=exps.get(r.info.experiment_id, r.info.experiment_id), status=r.info.status,
                         start_time=r.info.start_time, parent_id=tags.get(PARENT_TAG), params=dict(r.data.params),
                         metrics=dict(r.data.metrics), tags=tags))
    return out


def runs_by_id(uri: str) -> dict[str, MlRun]:
    return {r.run_id: r for r in runs(uri)}


@st.cache_data(ttl=TTL_S, show_spinner=False)
def metric_history(uri: str, run_id: str, key: str) -> list[tuple[int, float]]:
    """(step, value) sorted by step; of several values at one step, the last logged is kept."""
    points = sorted(client(uri).get_metric_history(run_id, key), key=lambda m: (m.step, m.timestamp))
    by_step: dict[int, float] = {}
    for m in points:
        by_step[int(m.step)] = float(m.value)
    return sorted(by_step.items())


@st.cache_data(ttl=TTL_S, show_spinner=False)
def artifact_exists(uri: str, run_id: str, path: str) -> bool:
    parent = path.rsplit("/", 1)[0] if "/" in path else None
    try:
        return any(a.path == path and not a.is_dir for a in client(uri).list_artifacts(run_id, parent))
    except Exception:  # noqa: BLE001 - an unreadable artifact store hides the run's artifacts, not the page
        return False


def runs_with_artifact(uri: str, path: str, top_level_only: bool = False) -> list[MlRun]:
    """Runs (newest first) that logged the artifact `path`: one listing per run, cached. A sweep's table
    sits on its parent run, so `top_level_only` skips the (many) cell runs nested under parents."""
    return [r for r in runs(uri) if not (top_level_only and r.parent_id) and artifact_exists(uri, r.run_id, path)]


@st.cache_data(ttl=300, show_spinner=False)
def artifact_text(uri: str, run_id: str, path: str) -> str:
    with tempfile.TemporaryDirectory(prefix="envace-dash-") as tmp:
        local = client(uri).download_artifacts(run_id, path, tmp)
        return Path(local).read_text(encoding="utf-8")


def artifact_json(uri: str, run_id: str, path: str) -> Any:
    import json

    return json.loads(artifact_text(uri, run_id, path))
