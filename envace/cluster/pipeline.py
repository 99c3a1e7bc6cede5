"""The cluster pipeline's steps (the Prefect flow `flows/cluster_pipeline.py` calls them in order):

1. `version_data`: export the tool world (CM2 JSON + verl parquet), `dvc add` it, hash every file.
2. `train_on_verl`: the verl launcher (`envace.trainers.verl.launcher`) with the exported parquet as
   train / val files and the checkpoints under the pipeline's directory. Its config is always composed
   with verl's own Hydra config first (a bad key fails here, not on the cluster). `mode: run` checks that
   the Ray cluster has the GPUs the config asks for, then the launcher's preflight (data files, judge
   probe, GPUs per node) runs and `main_ppo` blocks; verl's MLflow logger
   attaches to the pipeline's `verl-train` child run (MLFLOW_RUN_ID in the job's runtime env).
   `dry_run` composes and returns the command without training, then goes on with the checkpoints
   already under `checkpoints` when that is set (else the pipeline ends there); `skip` trains nothing.
3. for each `global_step_N/actor` checkpoint: `envace.cluster.checkpoints.merge_checkpoint` (verl's model
   merger -> HF dir), then `evaluate_served`: serve it (`envace.cluster.serving`, envace serve or vLLM)
   and evaluate the benchmarks through the evaluation's policy endpoint slot (`policy.base_url`).
Everything is logged under one MLflow parent run: children `data`, `verl-train`, `eval-step-N`; the
parent gets each checkpoint's metrics at step N (the evaluation curve over training).

A step that raises stops the pipeline: `PipelineStopped` names the step, the parent run ends FAILED with
the tag `envace.stopped_at`, and `<out_dir>/pipeline.json` records every step's status.
"""

from __future__ import annotations

import json
from enum import Enum
from pathlib import Path
from typing import Any

from pydantic import Field, model_validator

from envace.cluster.serving import ServeConfig, served_endpoint
from envace.config import BaseConfig, ConfigError, load_config

DEFAULT_BENCHMARKS = ["bfcl", "tau2", "vita", "finmcp"]


class TrainMode(str, Enum):
    RUN = "run"  # launch main_ppo on the Ray cluster (blocks until training ends)
    DRY_RUN = "dry_run"  # compose the command, train nothing; continue only with given `checkpoints`
    SKIP = "skip"  # no training: evaluate the checkpoints already under `checkpoints`


class StepStatus(str, Enum):
    DONE = "done"
    FAILED = "failed"
    NOT_RUN = "not_run"


class PipelineStopped(RuntimeError):
    """A step failed; `step` names it."""

    def __init__(self, step: str, error: str) -> None:
        super().__init__(f"the cluster pipeline stopped at step {step!r}: {error}")
        self.step, self.error = step, error


class DataStep(BaseConfig):
    enabled: bool = Field(True, description="Export and version a tool-world snapshot "
                                            "(False: use train.config's files).")
    counts: dict[str, int] = Field(default_factory=lambda: {"train": 4000, "val": 200, "test": 200},
                                   description="Tasks per split.")
    seed: int = Field(0, description="Tool-world generator seed.")
    repo_root: str = Field(".", description="DVC repository root (the snapshot must lie inside it).")
    out: str | None = Field(None, description="Snapshot dir (None: <repo_root>/data/snapshots/cluster_seed<seed>).")
    push: bool = Field(True, description="Push the snapshot to the DVC default remote.")

    def snapshot_dir(self) -> Path:
        return Path(self.out) if self.out else Path(self.repo_root) / "data" / "snapshots" / f"cluster_seed{self.seed}"


class TrainStep(BaseConfig):
    mode: TrainMode = Field(TrainMode.RUN, description="run | dry_run | skip.")
    config: str | None = Field(None, description="VerlLaunchConfig YAML (e.g. configs/verl/qwen3_8b_cm2.yaml).")
    overrides: list[str] = Field(default_factory=list, description="key=value overrides of that config.")


class EvalStep(BaseConfig):
    benchmarks: list[str] = Field(default_factory=lambda: list(DEFAULT_BENCHMARKS),
                                  description="Benchmarks evaluated through the endpoint (world needs a local model).")
    overrides: list[str] = Field(default_factory=list,
                                 description="EvalConfig overrides (paths.*, bench.*, judge.*, k).")


class ClusterPipelineConfig(BaseConfig):
    """`flows/cluster_pipeline.py`: data -> verl training -> merge -> serve -> evaluate, one MLflow parent."""

    name: str = Field("cluster-pipeline", description="MLflow parent run name.")
    out_dir: str = Field(..., description="Pipeline directory (merged/, eval/, logs/, pipeline.json); "
                                          "shared by the nodes.")
    mlflow_uri: str | None = Field(None, description="MLflow tracking URI or dir (None: <out_dir>/mlflow); a server "
                                                     "URI when the cluster's nodes log to it.")
    experiment: str = Field("envace-cluster", description="MLflow experiment.")
    data: DataStep = Field(default_factory=DataStep, description="Data versioning step.")
    train: TrainStep = Field(default_factory=TrainStep, description="verl training step.")
    checkpoints: str | None = Field(None, description="Directory of global_step_N/ (None: the launch config's "
                                                      "checkpoint_dir, else <out_dir>/verl_checkpoints).")
    steps: list[int] | None = Field(None, description="Checkpoint steps to evaluate (None: all found).")
    serve: ServeConfig = Field(default_factory=ServeConfig, description="How each merged checkpoint is served.")
    eval: EvalStep = Field(default_factory=EvalStep, description="Evaluation through the endpoint slot.")

    @model_validator(mode="after")
    def _check(self) -> ClusterPipelineConfig:
        if self.train.mode is not TrainMode.SKIP and not self.train.config:
            raise ConfigError(f"train.mode is {self.train.mode.value} but train.config is not set; name a verl "
                              f"launch YAML (configs/verl/qwen3_8b_cm2.yaml) or set train.mode=skip")
        if "world" in self.eval.benchmarks:
            raise ConfigError("eval.benchmarks names world, which needs a local model; the cluster pipeline "
                              "evaluates through an endpoint: use bfcl, tau2, vita, finmcp")
        return self

    def resolved_mlflow_uri(self) -> str:
        """envace.tracking.locations: `<out_dir>/mlflow/mlflow.db` unless `mlflow_uri` names one."""
        from envace.tracking.locations import Kind, locations

        return locations(self.out_dir, Kind.CLUSTER, mlflow_uri=self.mlflow_uri).mlflow_uri


# ----- step 1: data ---------------------------------------------------------------------------


def version_data(cfg: ClusterPipelineConfig) -> dict[str, Any]:
    """Export, `dvc add` and hash the snapshot; returns {dir, md5, dvc_file, splits, hashes}."""
    from envace.data.export import export_world
    from envace.data.versioning import add_dataset
    from envace.provenance.dvc_hash import input_hashes

    out = cfg.data.snapshot_dir()
    splits = export_world(out, cfg.data.counts, cfg.data.seed)
    version = add_dataset(out, cfg.data.repo_root, push=cfg.data.push)
    files = [str(v) for split in splits.values() for k, v in split.items() if k in ("cm2", "parquet")]
    return {"dir": str(out.resolve()), "md5": version.md5, "dvc_file": str(version.dvc_file),
            "splits": splits, "hashes": input_hashes([str(out), *files])}


# ----- step 2: verl training ------------------------------------------------------------------


def launch_config(cfg: ClusterPipelineConfig, data: dict[str, Any] | None):
    """The VerlLaunchConfig of the run: the YAML + overrides, the exported parquet files, the checkpoint dir."""
    from envace.trainers.verl.config import VerlLaunchConfig

    extra: list[str] = []
    if data:
        splits = data["splits"]
        extra.append(f"train_files=[{splits['train']['parquet']}]")
        val = splits.get("val") or splits.get("test")
        if val:
            extra.append(f"val_files=[{val['parquet']}]")
    launch = load_config(VerlLaunchConfig, cfg.train.config, [*extra, *cfg.train.overrides])
    if not launch.checkpoint_dir:
        launch = launch.model_copy(update={"checkpoint_dir": str(Path(cfg.out_dir).resolve() / "verl_checkpoints")})
    return launch


def checkpoint_root(cfg: ClusterPipelineConfig, train: dict[str, Any] | None) -> Path:
    """Where the checkpoints are: `checkpoints`, else the trained run's checkpoint dir, else the launch
    config's (train.mode=skip), else <out_dir>/verl_checkpoints."""
    if cfg.checkpoints:
        return Path(cfg.checkpoints)
    if train and train.get("checkpoint_dir"):
        return Path(train["checkpoint_dir"])
    if cfg.train.config:
        from envace.trainers.verl.config import VerlLaunchConfig

        launch = load_config(VerlLaunchConfig, cfg.train.config, cfg.train.overrides)
        if launch.checkpoint_dir:
            return Path(launch.checkpoint_dir)
    return Path(cfg.out_dir) / "verl_checkpoints"


def cluster_gpus(address: str) -> float:
    """GPUs the Ray cluster at `address` holds (connects as a driver, then disconnects)."""
    from envace.extras import require
    from envace.sweeps.ray_runner import restore_auth, use_token_auth

    ray = require("ray", "cluster", "the cluster pipeline")

    if ray.is_initialized():
        return float(ray.cluster_resources().get("GPU", 0.0))
    before = use_token_auth(None)
    try:
        ray.init(address=address, log_to_driver=False, logging_level="ERROR")
        try:
            return float(ray.cluster_resources().get("GPU", 0.0))
        finally:
            ray.shutdown()
    finally:
        restore_auth(before)


def cluster_node_gpus(address: str) -> list[float]:
    """GPUs per live node of the Ray cluster at `address`, connecting with the same token auth as
    `cluster_gpus` (what the launcher's preflight asks before main_ppo starts)."""
    from envace.sweeps.ray_runner import restore_auth, use_token_auth
    from envace.trainers.verl.preflight import ray_node_gpus

    before = use_token_auth(None)
    try:
        return ray_node_gpus(address)
    finally:
        restore_auth(before)


def train_on_verl(cfg: ClusterPipelineConfig, data: dict[str, Any] | None, mlflow_run_id: str | None) -> dict[str, Any]:
    """Compose (always), then run / dry-run the verl job; returns {mode, command, checkpoint_dir}."""
    import os

    from envace.tracking.mlflow_run import resolve_tracking_uri
    from envace.trainers.verl.launcher import build_overrides, compose_verl_config, launch_verl

    launch = launch_config(cfg, data)
    if mlflow_run_id:  # verl's MLflow logger resumes this run instead of opening its own
        launch = launch.model_copy(update={"overrides": [
            *launch.overrides, f"+ray_kwargs.ray_init.runtime_env.env_vars.MLFLOW_RUN_ID={mlflow_run_id}"]})
    environ = dict(os.environ)
    environ["MLFLOW_TRACKING_URI"] = resolve_tracking_uri(cfg.resolved_mlflow_uri())[0]
    compose_verl_config(build_overrides(launch, environ))  # a bad key or value fails before any cluster time
    dry = cfg.train.mode is TrainMode.DRY_RUN
    if not dry:
        address = launch.ray_address or environ.get("RAY_ADDRESS")
        if not address:
            raise ConfigError("no Ray cluster: set ray_address in the verl config or export RAY_ADDRESS=<head>:6379")
        need = launch.nnodes * launch.n_gpus_per_node
        have = cluster_gpus(address)
        if have < need:
            raise RuntimeError(f"the Ray cluster at {address} has {have:g} GPUs; the verl run asks for {need} "
                               f"(nnodes {launch.nnodes} x n_gpus_per_node {launch.n_gpus_per_node}). verl's FSDP "
                               f"actor and vLLM rollout need CUDA GPUs: run this step on a GPU cluster")
    cmd = launch_verl(launch, dry_run=dry, environ=environ, node_gpus=cluster_node_gpus)
    return {"mode": cfg.train.mode.value, "command": cmd, "checkpoint_dir": launch.checkpoint_dir}


# ----- step 3: serve and evaluate one merged checkpoint ---------------------------------------


def evaluate_served(cfg: ClusterPipelineConfig, model_dir: str, step: int) -> dict[str, Any]:
    """Serve `model_dir`, evaluate the benchmarks through its endpoint; returns {step, endpoint, results, metrics}."""
    from envace.evaluation.config import EvalConfig
    from envace.evaluation.run import run_eval

    out = Path(cfg.out_dir) / "eval" / f"global_step_{step}"
    out.mkdir(parents=True, exist_ok=True)
    with served_endpoint(model_dir, cfg.serve, log_path=out / "server.log") as ep:
        ecfg = load_config(EvalConfig, None, [*cfg.eval.overrides, f"policy.base_url={ep.base_url}",
                                              f"policy.model={ep.model}"],
                           benchmarks=list(cfg.eval.benchmarks), out_dir=str(out))
        results = run_eval(ecfg)
    metrics = benchmark_metrics(results)
    return {"step": step, "endpoint": ep.model_dump(), "results_file": results.get("written_to"),
            "metrics": metrics}


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def benchmark_metrics(results: dict[str, Any]) -> dict[str, float]:
    """MLflow metrics of an endpoint evaluation, from each benchmark's own scores only (not the report's
    paper reference rows): `eval/<bench>/overall`, `eval/<bench>/<category>/accuracy`, `eval/<bench>/<group>`."""
    from envace.benchmarks.base import jsonable
    from envace.tracking.mlflow_run import metric_key

    results = jsonable(results)  # BenchmarkResult objects -> the records eval.json holds
    out: dict[str, float] = {}
    for bench, res in ((results.get("benchmarks") or {}).get("results") or {}).items():
        if not isinstance(res, dict):
            continue
        if _number(res.get("overall")):
            out[f"eval/{bench}/overall"] = float(res["overall"])
        for cat, c in (res.get("categories") or {}).items():
            if isinstance(c, dict) and _number(c.get("accuracy")):
                out[f"eval/{bench}/{cat}/accuracy"] = float(c["accuracy"])
        for group, v in (res.get("groups") or {}).items():
            if _number(v):
                out[f"eval/{bench}/{group}"] = float(v)
    return {metric_key(k): v for k, v in out.items()}


def write_summary(cfg: ClusterPipelineConfig, summary: dict[str, Any]) -> Path:
    path = Path(cfg.out_dir) / "pipeline.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(summary, indent=2, default=str))
    return path
