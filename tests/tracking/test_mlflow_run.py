"""MLflow runs against a real SQLite tracking store in a temp dir (never ~/mlruns)."""

from __future__ import annotations

import hashlib
import json

import pandas as pd
import plotly.graph_objects as go
import pytest
from mlflow.tracking import MlflowClient
from pydantic import Field

from envace.config import BaseConfig
from envace.tracking.mlflow_checkpoints import log_checkpoint
from envace.tracking.mlflow_run import (
    TRUNCATED,
    child_runs,
    flatten_config,
    metric_key,
    resolve_tracking_uri,
    start_run,
)


class Inner(BaseConfig):
    temperature: float = Field(0.7, description="t")
    tools: list[str] = Field(default_factory=lambda: ["a", "b"], description="tools")


class Cfg(BaseConfig):
    lr: float = Field(1e-4, description="lr")
    note: str = Field("x" * 7000, description="long value")
    act: Inner = Field(default_factory=Inner, description="inner")


@pytest.fixture(scope="session")
def mlflow_dir(tmp_path_factory):
    """One tracking store for the module: MLflow's first-use schema migration takes seconds."""
    d = tmp_path_factory.mktemp("mlflow")
    uri, _ = resolve_tracking_uri(d)
    MlflowClient(tracking_uri=uri).search_experiments()  # run the migrations once
    return d


def test_run_with_params_role_metrics_tags_and_artifacts(mlflow_dir, tmp_path):
    data = tmp_path / "tasks.jsonl"
    data.write_bytes(b'{"uuid": 1}\n')
    ckpt = tmp_path / "step_3"
    ckpt.mkdir()
    (ckpt / "model.safetensors").write_bytes(b"\0" * 10)
    with start_run(mlflow_dir, "exp-a", "train-1", Cfg(), input_paths=[data], tags={"kind": "train"}) as run:
        run.log_step_metrics(0, {"act/reward": 0.25, "act/adv_mean": 0.0, "rehearse/adv_mean": -0.5,
                                 "rehearse/skipped": None})
        run.log_step_metrics(1, {"loss": 2.0})
        run.log_artifact_dict({"a": [1, 2]}, "samples/step_0.json")
        run.log_table(pd.DataFrame({"tool": ["x", "y"], "exact": [1.0, 0.5]}), "eval/fidelity.json")
        run.log_figure(go.Figure(go.Scatter(x=[0, 1], y=[0.25, 0.5])), "plots/reward.html")
        version = log_checkpoint(run, ckpt, register_as="envace-policy")
        run_id = run.run_id
        assert run.artifact_paths() == ["checkpoints/step_3/model.safetensors", "config.yaml",
                                        "eval/fidelity.json", "plots/reward.html", "samples/step_0.json"]
    client = MlflowClient(tracking_uri=run.tracking_uri)
    r = client.get_run(run_id)
    assert r.info.status == "FINISHED" and r.info.run_name == "train-1"
    assert r.data.params["lr"] == "0.0001" and r.data.params["act.temperature"] == "0.7"
    assert r.data.params["act.tools"] == '["a", "b"]'
    assert len(r.data.params["note"]) == 6000 and r.data.params["note"].endswith(TRUNCATED)
    assert r.data.metrics == {"act/reward": 0.25, "act/adv_mean": 0.0, "rehearse/adv_mean": -0.5, "loss": 2.0}
    md5 = hashlib.md5(b'{"uuid": 1}\n').hexdigest()
    assert r.data.tags[f"input.{metric_key(str(data))}"] == md5
    assert json.loads(r.data.tags["envace.inputs"]) == {str(data): md5}
    assert r.data.tags["kind"] == "train" and "git.commit" in r.data.tags
    assert version == "1"
    mv = client.get_model_version("envace-policy", "1")
    assert mv.run_id == run_id and mv.source.endswith("checkpoints/step_3")
    assert str(mlflow_dir) in r.info.artifact_uri  # artifacts beside mlflow.db, not ./mlruns


def test_parent_with_two_nested_children(mlflow_dir):
    with start_run(mlflow_dir, "exp-sweep", "sweep", {"grid": {"n": [1, 2]}}) as parent:
        kids = []
        for n in (1, 2):
            with start_run(mlflow_dir, "exp-sweep", f"n={n}", {"n": n}, parent_run_id=parent.run_id) as child:
                child.log_step_metrics(0, {"score": n / 2})
                kids.append(child.run_id)
    assert child_runs(mlflow_dir, parent.run_id) == sorted(kids)
    client = MlflowClient(tracking_uri=parent.tracking_uri)
    assert client.get_run(kids[0]).data.params == {"n": "1"}
    assert client.get_run(parent.run_id).data.params == {"grid.n": "[1, 2]"}


def test_resume_continues_the_same_run_and_steps(mlflow_dir):
    cfg = {"lr": 0.1, "steps": 6}
    with pytest.raises(RuntimeError):
        with start_run(mlflow_dir, "exp-r", "train", cfg) as run:
            for step in range(4):
                run.log_step_metrics(step, {"loss": 10.0 - step})
            raise RuntimeError("killed at step 4")
    client = MlflowClient(tracking_uri=run.tracking_uri)
    assert client.get_run(run.run_id).info.status == "FAILED"
    # resumed from the checkpoint of step 2: steps 2 and 3 run again, then 4 and 5
    with pytest.warns(UserWarning, match="changed params"):
        with start_run(mlflow_dir, "exp-r", "train", {**cfg, "steps": 8}, resume_run_id=run.run_id) as again:
            logged = [again.log_step_metrics(step, {"loss": 20.0 + step}) for step in range(2, 6)]
            assert again.run_id == run.run_id and again.resumed
    assert logged == [0, 0, 1, 1]
    assert again.metric_history("loss") == [(0, 10.0), (1, 9.0), (2, 8.0), (3, 7.0), (4, 24.0), (5, 25.0)]
    r = client.get_run(run.run_id)
    assert r.info.status == "FINISHED" and r.data.params["steps"] == "6"
    assert json.loads(r.data.tags["envace.resume_changed_params"]) == {"steps": ["6", "8"]}
    assert r.data.tags["envace.resume_count"] == "1"
    with pytest.raises(ValueError, match="cannot resume MLflow run 'nope'"):
        with start_run(mlflow_dir, "exp-r", "train", cfg, resume_run_id="nope"):
            pass


def test_flatten_config_and_keys():
    assert flatten_config({"a": {"b": 1, "c": {}}, "d": None}) == {"a.b": "1", "a.c": "{}", "d": "None"}
    assert metric_key("act/reward") == "act/reward"
    assert metric_key("/data/../x?.csv") == "data/__/x_.csv"
    with pytest.raises(TypeError, match="BaseConfig or a dict"):
        flatten_config(["not", "a", "config"])
