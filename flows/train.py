"""Training: the RL flow on the embedded backend
(`envace.trainers.embedded.train`, which logs its own MLflow run and resumes from its latest checkpoint) or on verl
(`envace.trainers.verl.launcher.launch_verl`, against the Ray cluster at RAY_ADDRESS; `dry_run` only
builds and returns the command). A run whose config names an endpoint (LLM judge, simulator, remote
model) is retried with exponential backoff; a retry resumes from the last checkpoint.
"""

from __future__ import annotations

from typing import Any, Literal

from prefect import flow, get_run_logger, task
from prefect.tasks import exponential_backoff

from envace.config import BaseConfig, load_config
from envace.sweeps.cells import calls_endpoint
from envace.trainers.config import TrainConfig


@task(name="train-embedded")
def train_task(cfg: TrainConfig) -> dict[str, Any]:
    from envace.trainers.embedded import train

    res = train(cfg)
    last = res.history[-1] if res.history else {}
    return {"out_dir": str(res.out_dir), "last_step": res.last_step,
            "checkpoint": str(res.checkpoint) if res.checkpoint else None, "mlflow_run_id": res.mlflow_run_id,
            "reward/mean": last.get("reward/mean")}


@task(name="train-verl")
def verl_task(cfg: BaseConfig, dry_run: bool) -> list[str]:
    from envace.trainers.verl.launcher import launch_verl

    return launch_verl(cfg, dry_run=dry_run)


def with_endpoint_retries(t, cfg: BaseConfig, retries: int, backoff_s: float, force: bool | None = None):
    """`t` with retries + exponential backoff when `cfg` names an endpoint (or `force` is True; False
    never retries), else unchanged."""
    remote = calls_endpoint(cfg) if force is None else force
    if retries and remote:
        return t.with_options(retries=retries, retry_delay_seconds=exponential_backoff(backoff_factor=backoff_s),
                              retry_jitter_factor=0.2)
    return t


@flow(name="train")
def train_flow(config: str, overrides: list[str] | None = None,
               backend: Literal["embedded", "verl"] = "embedded", dry_run: bool = False,
               retries: int = 2, retry_backoff_s: float = 30.0) -> dict[str, Any]:
    """RL training from a TrainConfig YAML (embedded) or a VerlLaunchConfig YAML (verl)."""
    logger = get_run_logger()
    if backend == "verl":
        from envace.trainers.verl.config import VerlLaunchConfig

        cfg = load_config(VerlLaunchConfig, config, overrides or [])
        cmd = with_endpoint_retries(verl_task, cfg, 0 if dry_run else retries, retry_backoff_s)(cfg, dry_run)
        logger.info("verl command (%s): %s", "dry run" if dry_run else "ran", " ".join(cmd[:3]) + " …")
        return {"backend": "verl", "dry_run": dry_run, "command": cmd}
    if dry_run:
        raise ValueError("dry_run is only meaningful for backend='verl'; the embedded trainer has no dry run")
    cfg = load_config(TrainConfig, config, overrides or [])
    out = with_endpoint_retries(train_task, cfg, retries, retry_backoff_s)(cfg)
    logger.info("trained %s to step %s; checkpoint %s; MLflow run %s", cfg.out_dir, out["last_step"],
                out["checkpoint"], out["mlflow_run_id"])
    return {"backend": "embedded", **out}
