"""Training flows: the embedded trainer as a Prefect task; verl as a dry run; retries only for configs
that call an endpoint."""

from __future__ import annotations

from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from envace.config import load_config
from envace.trainers.config import TrainConfig

pytestmark = pytest.mark.flows
REPO = Path(__file__).resolve().parents[2]
VERL_EXAMPLE = sorted((REPO / "configs" / "verl").glob("*.yaml"))[0]  # the shipped verl launch config


def test_embedded_training_flow(prefect_harness, tiny_model, toy_train, tmp_path):
    from envace_flows.train import train_flow

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    out = train_flow(str(REPO / "configs/train/envace.yaml"),
                     [f"model={tiny_model}", f"out_dir={tmp_path / 'rl'}", f"tracking.mlflow_uri={uri}", *toy_train])
    assert out["backend"] == "embedded" and out["last_step"] == 1
    assert Path(out["checkpoint"]).name == "step_000001" and (Path(out["checkpoint"]) / "policy").is_dir()
    assert MlflowClient(tracking_uri=uri).get_run(out["mlflow_run_id"]).info.status == "FINISHED"


def test_verl_backend_dry_run_builds_the_command(prefect_harness):
    from envace_flows.train import train_flow

    out = train_flow(str(VERL_EXAMPLE), ["total_training_steps=5"], backend="verl",
                     dry_run=True)
    cmd = out["command"]
    assert cmd[1:3] == ["-m", "verl.trainer.main_ppo"]
    assert "trainer.total_training_steps=5" in cmd


def test_endpoint_retries_only_for_configs_with_a_url():
    from envace.trainers.verl.config import VerlLaunchConfig
    from envace_flows.train import train_task, verl_task, with_endpoint_retries

    verl_cfg = load_config(VerlLaunchConfig, VERL_EXAMPLE)  # LLM judge URL
    local = load_config(TrainConfig, REPO / "configs/train/envace.yaml")
    t = with_endpoint_retries(verl_task, verl_cfg, 3, 5.0)
    assert t.retries == 3 and list(t.retry_delay_seconds) == [5.0, 10.0, 20.0]  # exponential backoff
    assert with_endpoint_retries(train_task, local, 3, 5.0).retries == 0
    assert with_endpoint_retries(train_task, local, 3, 5.0, force=True).retries == 3
