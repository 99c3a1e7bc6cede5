"""The data versioning flow: export -> dvc add (+ push to the local default remote) -> hashes in MLflow."""

from __future__ import annotations

import pytest
from mlflow.tracking import MlflowClient

from envace.provenance.dvc_hash import content_hash, file_md5
from envace.tracking.mlflow_run import metric_key

pytestmark = pytest.mark.flows


def test_snapshot_is_versioned_and_its_hashes_logged(prefect_harness, tmp_path):
    from envace_flows.data import data_versioning

    repo = tmp_path / "repo"
    repo.mkdir()
    snap = repo / "data" / "snap"
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    out = data_versioning(out_dir=str(snap), counts={"train": 4, "test": 2}, seed=3, repo_root=str(repo),
                          mlflow_uri=uri)
    md5 = out["version"]["md5"]
    assert md5 == content_hash(snap)  # DVC's own md5 equals the tree hash computed independently
    assert (repo / "data" / "snap.dvc").is_file()
    assert any((repo / ".dvc-storage").rglob("*"))  # pushed to the local default remote
    train_json = str(snap / "train.json")
    assert out["hashes"][train_json] == file_md5(train_json)
    run = MlflowClient(tracking_uri=uri).get_run(out["mlflow_run_id"])
    assert run.data.tags[f"input.{metric_key(str(snap))}"] == md5
    assert run.data.tags[f"input.{metric_key(train_json)}"] == file_md5(train_json)
    assert run.data.tags["dvc.md5"] == md5
    assert run.data.params["seed"] == "3"
