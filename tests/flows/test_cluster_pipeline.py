"""The cluster pipeline flow on CPU, as far as it goes here.

- The full chain with real components: the tool world exported and DVC-versioned; the verl launch config
  composed with verl's own Hydra config (dry run: no GPU); a checkpoint that verl's own
  `FSDPCheckpointManager` wrote on CPU (2 ranks, FSDP2 over gloo, one SGD step: tests/flows/
  fsdp_checkpoint_writer.py) merged by verl's model merger into an HF dir; that dir served by `envace
  serve` in a child process and evaluated on FinMCP (fixture data) through the policy endpoint slot;
  MLflow children data / verl-train / eval-step-1 under one parent. The merged weights are checked
  against the full weights the writer gathered itself.
- Where it stops on CPU: `train.mode=run` against a real (GPU-less) Ray head stops at `verl-train`,
  before launching, with the GPU count named; the parent run ends FAILED with the step as a tag.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.flows, pytest.mark.verl, pytest.mark.timeout(1800)]

REPO = Path(__file__).resolve().parents[2]
WRITER = Path(__file__).with_name("fsdp_checkpoint_writer.py")
FINMCP = REPO / "tests" / "fixtures" / "bench" / "finmcp" / "benchmark_synthetic.json"
VERL_CONFIG = REPO / "configs" / "verl" / "qwen3_8b_cm2.yaml"


@pytest.fixture(scope="module")
def verl_checkpoints(tiny_model, tmp_path_factory) -> Path:
    """<root>/global_step_1/actor written by verl's checkpoint manager (2 CPU ranks), and <root>/global_step_1/
    expected.pt: the full weights after the step, gathered by the writer."""
    from envace.cluster.ray_head import free_port

    root = tmp_path_factory.mktemp("verl_ckpts")
    actor = root / "global_step_1" / "actor"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-addr",
                           "127.0.0.1", "--master-port", str(free_port()), str(WRITER), str(tiny_model), str(actor)],
                          env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return root


def _spec(tmp_path: Path, tiny_model: Path, **fields) -> dict:
    repo = tmp_path / "repo"
    repo.mkdir(exist_ok=True)
    return {"name": "cluster-test", "out_dir": str(tmp_path / "pipe"),
            "mlflow_uri": f"sqlite:///{tmp_path / 'mlflow.db'}",
            "experiment": "cluster-test",
            "data": {"counts": {"train": 6, "val": 2, "test": 2}, "seed": 1, "repo_root": str(repo),
                     "out": str(repo / "data" / "snap")},
            "train": {"mode": "dry_run", "config": str(VERL_CONFIG),
                      "overrides": [f"model={tiny_model}", "nnodes=1", "n_gpus_per_node=1"]},
            "eval": {"benchmarks": ["finmcp"], "overrides": [f"paths.finmcp={FINMCP}", "k=1", "bench_limit=1",
                                                              "policy.max_tokens=8", "threads=1"]},
            **fields}


def _runs(uri: str, parent_id: str) -> dict[str, object]:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    parent = client.get_run(parent_id)
    runs = client.search_runs([parent.info.experiment_id], f"tags.`mlflow.parentRunId` = '{parent_id}'")
    return {r.info.run_name: r for r in runs}


@pytest.mark.slow  # FSDP on 2 ranks, a merge, a served model; the stop on CPU below is the quick form
def test_pipeline_runs_on_cpu_from_data_to_endpoint_evaluation(prefect_harness, tiny_model, verl_checkpoints, tmp_path):
    import torch
    from mlflow.tracking import MlflowClient
    from safetensors.torch import load_file

    from envace.provenance.dvc_hash import content_hash
    from envace_flows.cluster_pipeline import cluster_pipeline

    spec = _spec(tmp_path, tiny_model, checkpoints=str(verl_checkpoints))
    out = cluster_pipeline(spec=spec)

    assert out["stopped_at"] is None
    assert {k: v.value if hasattr(v, "value") else v for k, v in out["steps"].items()} == {
        "data": "done", "verl-train": "done", "merge": "done", "evaluate": "done"}
    snap = tmp_path / "repo" / "data" / "snap"
    assert out["data"]["md5"] == content_hash(snap) and (tmp_path / "repo" / "data" / "snap.dvc").is_file()

    cmd = out["train"]["command"]  # composed against verl's config with the exported parquet as its data
    assert "verl.trainer.main_ppo" in cmd and f"data.train_files=[{snap / 'train.parquet'}]" in cmd

    # the merge: verl's merger output equals the weights verl's manager saved (gathered by the writer), in bf16
    merged_dir = Path(out["checkpoints"][1]["merged"]["target"])
    merged = load_file(merged_dir / "model.safetensors")
    expected = torch.load(verl_checkpoints / "global_step_1" / "expected.pt")
    assert merged and set(merged) <= set(expected)
    for key, value in merged.items():
        assert value.dtype == torch.bfloat16 and torch.equal(value, expected[key].to(torch.bfloat16)), key
    original = load_file(tiny_model / "model.safetensors")
    assert any(not torch.equal(merged[k], original[k].to(torch.bfloat16)) for k in merged)  # the SGD step is in it

    # evaluation through the endpoint slot of a served merged checkpoint
    ev = out["checkpoints"][1]["eval"]
    data = json.loads(Path(ev["results_file"]).read_text())
    assert data["models"]["policy"]["kind"] == "endpoint"
    assert data["models"]["policy"]["base_url"] == ev["endpoint"]["base_url"]
    finmcp = data["benchmarks"]["results"]["finmcp"]
    assert [r["id"] for r in finmcp["records"]] == ["f1"]
    assert ev["metrics"]["eval/finmcp/overall"] == finmcp["overall"]  # the benchmark's own score, not the report's
    assert ev["metrics"]["eval/finmcp/TF1_macro"] == finmcp["groups"]["TF1_macro"]
    assert not any("paper" in k for k in ev["metrics"])

    uri = spec["mlflow_uri"]
    children = _runs(uri, out["parent_run_id"])
    assert set(children) == {"data", "verl-train", "eval-step-1"}
    assert children["data"].data.tags["dvc.md5"] == out["data"]["md5"]
    eval_metrics = children["eval-step-1"].data.metrics
    assert eval_metrics and set(eval_metrics) == set(ev["metrics"])
    parent = MlflowClient(tracking_uri=uri).get_run(out["parent_run_id"])
    assert parent.info.status == "FINISHED" and set(ev["metrics"]) <= set(parent.data.metrics)

    again = cluster_pipeline(spec=spec)  # the merge is not redone for unchanged shards
    assert again["checkpoints"][1]["merged"]["cached"] is True


def test_pipeline_stops_at_verl_training_on_a_cluster_without_gpus(prefect_harness, tiny_model, ray_head, tmp_path,
                                                                  monkeypatch):
    from mlflow.tracking import MlflowClient

    from envace.cluster.pipeline import PipelineStopped
    from envace_flows.cluster_pipeline import cluster_pipeline

    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(ray_head.token_path))
    monkeypatch.setenv("RAY_AUTH_MODE", "token")
    spec = _spec(tmp_path, tiny_model)
    spec["train"] = {**spec["train"], "mode": "run", "overrides": [*spec["train"]["overrides"],
                                                                   f"ray_address={ray_head.address}"]}
    with pytest.raises(PipelineStopped, match="verl-train") as stop:
        cluster_pipeline(spec=spec)
    assert "has 0 GPUs; the verl run asks for 1" in stop.value.error
    summary = json.loads((tmp_path / "pipe" / "pipeline.json").read_text())
    assert summary["stopped_at"] == "verl-train"
    assert summary["steps"] == {"data": "done", "verl-train": "failed", "merge": "not_run", "evaluate": "not_run"}
    parent = MlflowClient(tracking_uri=spec["mlflow_uri"]).get_run(summary["parent_run_id"])
    assert parent.info.status == "FAILED" and parent.data.tags["envace.stopped_at"] == "verl-train"
    import ray

    assert not ray.is_initialized()  # the GPU check disconnected from the cluster
