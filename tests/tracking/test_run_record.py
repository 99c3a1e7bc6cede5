"""One run record ends its MLflow run and every store run with one outcome: FINISHED, FAILED with the
error recorded, KILLED on Ctrl-C, and FAILED everywhere when the MLflow run was marked failed; every store
run names its MLflow run whatever the outcome. A record without MLflow (store runs alone) ends the same way."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import sqlalchemy as sa
from mlflow.tracking import MlflowClient

from envace.store.runs import RunInfo
from envace.store.synthetic import synthetic_trajectory
from envace.tracking.locations import Kind, locations
from envace.tracking.run_record import RunRecord, tracked_run


def _store_runs(db) -> dict[str, tuple[str, str | None]]:
    engine = sa.create_engine(f"sqlite:///{db}")
    try:
        with engine.connect() as c:
            return {r[0]: (r[1], r[2]) for r in c.execute(sa.text("SELECT id, status, mlflow_run_id FROM runs"))}
    finally:
        engine.dispose()


def _open(record: RunRecord) -> None:
    record.start_mlflow("exp", "job", {"lr": 1}, kind="eval", tags={"envace.cell": "c"})
    writer = record.start_store_run(RunInfo(id="streamed", name="job", kind="eval"))
    writer.put([synthetic_trajectory(0, 1, 0, 0, n_gen=2)], step=1, mode="eval", split="test")
    record.start_store_run(RunInfo(id="bench", name="job-bfcl", kind="eval"), writer=False)


@pytest.mark.parametrize(("exc", "status"), [(None, "FINISHED"), (RuntimeError("boom"), "FAILED"),
                                             (KeyboardInterrupt(), "KILLED")])
def test_every_run_of_a_record_ends_with_one_outcome(tmp_path, exc, status):
    loc = locations(tmp_path / "job", Kind.EVAL)
    with pytest.raises(type(exc)) if exc is not None else _nothing():
        with RunRecord(loc) as record:
            _open(record)
            assert _store_runs(loc.store_url) == {"streamed": ("running", None), "bench": ("running", None)}
            if exc is not None:
                raise exc
    run = MlflowClient(loc.mlflow_uri).get_run(record.mlflow.run_id)
    assert loc.mlflow_uri == f"sqlite:///{tmp_path}/mlflow/mlflow.db"
    assert (run.info.status, run.data.tags["envace.kind"], run.data.tags["envace.cell"]) == (status, "eval", "c")
    linked = record.mlflow.run_id  # every store run names the MLflow run it belongs to, however it ended
    assert _store_runs(tmp_path / "job" / "store.db") == {"streamed": (status.lower(), linked),
                                                          "bench": (status.lower(), linked)}
    assert run.data.tags.get("envace.error") == ("RuntimeError: boom" if status == "FAILED" else None)
    with sa.create_engine(f"sqlite:///{tmp_path / 'job' / 'store.db'}").connect() as c:
        assert c.execute(sa.text("SELECT count(*) FROM trajectories")).scalar() == 1  # committed either way


def test_a_run_marked_failed_ends_failed_everywhere(tmp_path):
    loc = locations(tmp_path / "sweep", Kind.SWEEP)
    with RunRecord(loc) as record:
        _open(record)
        record.mlflow.mark_failed("1 of 2 cells failed")
    run = MlflowClient(loc.mlflow_uri).get_run(record.mlflow.run_id)
    assert (run.info.status, run.data.tags["envace.failure"]) == ("FAILED", "1 of 2 cells failed")
    assert {s for s, _ in _store_runs(loc.store_url).values()} == {"failed"}


def test_store_runs_alone_end_with_the_block(tmp_path):
    db = tmp_path / "store.db"
    with pytest.raises(ValueError, match="no MLflow location"):
        with RunRecord(store_url=db) as record:
            record.start_store_run(RunInfo(id="w", kind="eval"))
            record.start_mlflow("exp", "x", None, kind="eval")
    assert _store_runs(db) == {"w": ("failed", None)}
    with RunRecord(store_url=db) as record:
        record.start_store_run(RunInfo(id="w2", kind="eval"))
    assert _store_runs(db)["w2"] == ("finished", None)
    with pytest.raises(ValueError, match="locations"):
        RunRecord()


def test_a_tracked_run_is_a_record_with_one_mlflow_run_and_its_parent(tmp_path):
    uri = locations(tmp_path / "flow", Kind.FLOW).mlflow_uri
    with tracked_run(uri, "exp", "pipeline", {"n": 1}, kind="pipeline") as parent:
        with pytest.raises(RuntimeError, match="boom"):
            with tracked_run(uri, "exp", "eval", {}, kind="eval", parent_run_id=parent.run_id,
                             tags={"envace.step": 3}) as child:
                raise RuntimeError("boom")
    client = MlflowClient(uri)
    p, c = client.get_run(parent.run_id), client.get_run(child.run_id)
    assert (p.info.status, p.data.tags["envace.kind"]) == ("FINISHED", "pipeline")
    assert (c.info.status, c.data.tags["envace.kind"], c.data.tags["envace.step"]) == ("FAILED", "eval", "3")
    assert c.data.tags["mlflow.parentRunId"] == parent.run_id
    assert c.data.tags["envace.error"] == "RuntimeError: boom"


def test_only_the_run_record_opens_an_mlflow_run():
    """Every command's MLflow runs go through RunRecord (train, eval, worldbench, sweeps, demo, flows)."""
    root = Path(__file__).resolve().parents[2]
    callers = []
    for pkg in ("envace", "flows"):
        for path in sorted((root / pkg).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                name = getattr(node, "func", None)
                if isinstance(node, ast.Call) and getattr(name, "id", getattr(name, "attr", "")) == "start_run":
                    callers.append(path.relative_to(root).as_posix())
    assert callers == ["envace/tracking/run_record.py"]


class _nothing:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False
