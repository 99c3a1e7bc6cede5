"""Checkpoints in MLflow, against real SQLite MLflow stores: `envace train` lists every
saved checkpoint in its run (uploaded as artifacts under the size threshold, with its content hash) and
registers the final one; a checkpoint over the threshold is linked by path, not copied; `envace eval` of a
checkpoint tags its run with the training run and the checkpoint's hash, step and path."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from mlflow.tracking import MlflowClient

from envace.provenance.checkpoint_ref import checkpoint_ref
from envace.provenance.dvc_hash import content_hash
from envace.tracking.mlflow_checkpoints import log_checkpoint, logged_checkpoints, registered_model_name
from envace.tracking.mlflow_run import start_run


@pytest.fixture(scope="module")
def world_model_dir(tmp_path_factory):
    """A tiny random model whose tokenizer knows the tool world."""
    from envace.models.corpus import world_corpus
    from envace.models.tiny import TinyModelConfig, init_tiny_model

    cfg = TinyModelConfig(hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2, head_dim=16,
                          intermediate_size=128, vocab_size=700, seed=0)
    return init_tiny_model(world_corpus(120, seed=0), tmp_path_factory.mktemp("tiny") / "model", cfg)


def envace(*args: str, cwd) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "MLFLOW_ENABLE_TELEMETRY": "false"}
    return subprocess.run([sys.executable, "-m", "envace.cli", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=900)


def test_a_checkpoint_over_the_threshold_is_linked_not_copied(tmp_path):
    small, big = tmp_path / "step_000001", tmp_path / "step_000002"
    for d, n in ((small, 10), (big, 3 * 2**20)):
        (d / "policy").mkdir(parents=True)
        (d / "policy" / "model.safetensors").write_bytes(b"\1" * n)
    with start_run(tmp_path / "ml", "exp", "train") as run:
        assert log_checkpoint(run, small, step=1, content_hash="h1", max_artifact_mb=1) is None
        version = log_checkpoint(run, big, step=2, content_hash="h2", max_artifact_mb=1, register_as="m")
        assert run.artifact_paths() == ["checkpoints/step_000001/policy/model.safetensors"]  # not the big one
        client, run_id = run.client, run.run_id
    logged = logged_checkpoints(client, run_id)
    assert logged["step_000001"] == {"step": 1, "bytes": 10, "uploaded": True, "hash": "h1",
                                     "path": str(small.resolve()),
                                     "source": f"{run.artifact_uri}/checkpoints/step_000001"}
    assert logged["step_000002"] == {"step": 2, "bytes": 3 * 2**20, "uploaded": False, "hash": "h2",
                                     "path": str(big.resolve()), "source": str(big.resolve())}
    mv = client.get_model_version("m", version)
    assert mv.source == str(big.resolve()) and mv.run_id == run_id
    assert mv.tags["envace.checkpoint.hash"] == "h2" and mv.tags["envace.checkpoint.uploaded"] == "false"


def test_registered_model_names_are_sanitised():
    assert registered_model_name("envace-my run/1") == "envace-my-run-1"
    assert registered_model_name("///") == "envace-model"


@pytest.mark.slow
def test_train_lists_its_checkpoints_and_eval_links_to_the_one_it_scored(world_model_dir, tmp_path):
    out, uri = tmp_path / "run", f"sqlite:///{tmp_path / 'mlflow.db'}"
    train = envace("train", f"model={world_model_dir}", f"out_dir={out}", "steps=2", "save_every=1",
                   "keep_checkpoints=2", "prompts_per_step=2", "k=2", "threads=1", "progress=false",
                   "data.n_tasks=20", "rollout.max_assistant_turns=2", "rollout.act.max_new_tokens=8",
                   "rollout.rehearse.max_new_tokens=8", "shadow_monitor=false", f"tracking.mlflow_uri={uri}",
                   cwd=tmp_path)
    assert train.returncode == 0, train.stderr[-3000:]
    train_run = json.loads(train.stdout[train.stdout.index("{"):])["mlflow_run_id"]
    client = MlflowClient(uri)
    ckpts = out / "checkpoints"
    logged = logged_checkpoints(client, train_run)
    assert sorted(logged) == ["step_000001", "step_000002"]
    for name, rec in logged.items():  # each save: uploaded (tiny), with the hash of the model it holds
        assert rec["uploaded"] and rec["step"] == int(name.split("_")[1])
        assert rec["hash"] == content_hash(ckpts / name / "policy")
    artifacts = {f.path for f in client.list_artifacts(train_run, "checkpoints/step_000002/policy")}
    assert "checkpoints/step_000002/policy/model.safetensors" in artifacts
    versions = client.search_model_versions(f"name = '{registered_model_name('envace-run')}'")
    assert len(versions) == 1  # only the final checkpoint is registered
    final = versions[0]
    assert final.run_id == train_run and final.tags["envace.checkpoint.step"] == "2"
    assert final.tags["envace.checkpoint.hash"] == logged["step_000002"]["hash"]

    ev = envace("eval", str(ckpts / "step_000002"), "--benchmarks", "world", "n_tasks=1", "-k", "1",
                "fidelity=false", "device=cpu", "threads=1", "rollout.max_assistant_turns=1",
                "rollout.act.max_new_tokens=8", f"out_dir={tmp_path / 'eval'}", "tracking.enabled=true",
                f"tracking.mlflow_uri={uri}", f"tracking.store_url={tmp_path / 'eval_store.db'}", cwd=tmp_path)
    assert ev.returncode == 0, ev.stderr[-3000:]
    eval_run = json.loads((tmp_path / "eval" / "eval.json").read_text())
    tags = client.get_run(client.search_runs(
        [client.get_experiment_by_name("envace").experiment_id], "tags.`envace.kind` = 'eval'")[0].info.run_id
    ).data.tags
    assert tags["envace.train_run_id"] == train_run
    assert tags["envace.checkpoint.hash"] == logged["step_000002"]["hash"]
    assert tags["envace.checkpoint.step"] == "2"
    assert tags["envace.checkpoint.path"] == str((ckpts / "step_000002" / "policy").resolve())
    assert eval_run["store"]["checkpoint"] == checkpoint_ref(ckpts / "step_000002").__dict__
