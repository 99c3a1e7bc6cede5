"""The full pipeline flow at toy sizes: data -> tiny model -> SFT -> RL -> evaluation, one MLflow parent
run with the training and evaluation runs as children."""

from __future__ import annotations

from pathlib import Path

import pytest

from envace.tracking.mlflow_run import child_runs

pytestmark = pytest.mark.flows
REPO = Path(__file__).resolve().parents[2]


def test_full_pipeline_toy(prefect_harness, toy_train, toy_eval, tmp_path):
    from envace_flows.pipeline import full_pipeline

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    out = full_pipeline(
        out_dir=str(tmp_path / "p"), counts={"train": 6, "test": 2}, corpus_tasks=30,
        model_overrides=["hidden_size=32", "num_layers=1", "num_heads=2", "num_kv_heads=1", "head_dim=16",
                         "intermediate_size=64", "vocab_size=400"],
        sft_overrides=["steps=2", "batch_size=2", "threads=1", "progress=false"],
        train_config=str(REPO / "configs/train/envace.yaml"), train_overrides=[*toy_train, "data.n_tasks=6"],
        eval_overrides=toy_eval, mlflow_uri=uri)
    p = tmp_path / "p"
    assert (p / "data" / "train.json").is_file() and (p / "models" / "tiny" / "config.json").is_file()
    assert (p / "sft" / "model" / "config.json").is_file()
    assert out["sft"]["steps"] == 2
    assert Path(out["train"]["checkpoint"]).parent == p / "rl" / "checkpoints"
    assert out["eval"]["failed"] == {} and "world" in out["eval"]["results"]
    kids = set(child_runs(uri, out["mlflow_run_id"]))
    assert kids == {out["train"]["mlflow_run_id"], out["eval"]["mlflow_run_id"]}
