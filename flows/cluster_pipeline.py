"""The cluster pipeline flow: data versioning -> verl training with rehearsal on the Ray cluster -> for
each saved checkpoint, verl's model merger to an HF dir, served (envace serve / vLLM) and evaluated on
the benchmarks through the evaluation's endpoint slot -> one MLflow parent run. Each step is one task
calling one function of `envace.cluster.pipeline` (see it for the steps and what each one records).

    python -c "from envace_flows.cluster_pipeline import cluster_pipeline as p; p('configs/cluster/pipeline.yaml')"
    scheduled: the prefect.yaml deployment `cluster-pipeline-weekly` (docs/cluster.md)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger, task

from envace.cluster.checkpoints import find_checkpoints, merge_checkpoint
from envace.cluster.pipeline import (
    ClusterPipelineConfig,
    PipelineStopped,
    StepStatus,
    TrainMode,
    checkpoint_root,
    evaluate_served,
    train_on_verl,
    version_data,
    write_summary,
)
from envace.config import load_config
from envace.tracking.run_record import tracked_run


@task(name="data-version")
def data_task(cfg: ClusterPipelineConfig) -> dict[str, Any]:
    return version_data(cfg)


@task(name="verl-train")
def train_task(cfg: ClusterPipelineConfig, data: dict[str, Any] | None, run_id: str | None) -> dict[str, Any]:
    return train_on_verl(cfg, data, run_id)


@task(name="merge-checkpoint")
def merge_task(ckpt: Any, target: str, log_path: str) -> dict[str, Any]:
    return merge_checkpoint(ckpt, target, log_path)


@task(name="serve-and-evaluate")
def eval_task(cfg: ClusterPipelineConfig, model_dir: str, step: int) -> dict[str, Any]:
    return evaluate_served(cfg, model_dir, step)


@flow(name="cluster-pipeline")
def cluster_pipeline(config: str | None = None, overrides: list[str] | None = None,
                     spec: dict[str, Any] | None = None) -> dict[str, Any]:
    """Run the pipeline of the YAML `config` (or the mapping `spec`) with `key=value` overrides. Raises
    `PipelineStopped` naming the step that failed (after recording it in MLflow and pipeline.json)."""
    logger = get_run_logger()
    cfg = (ClusterPipelineConfig.model_validate(spec) if spec is not None
           else load_config(ClusterPipelineConfig, config, overrides or []))
    out = Path(cfg.out_dir).resolve()
    cfg = cfg.model_copy(update={"out_dir": str(out)})
    uri = cfg.resolved_mlflow_uri()
    steps = {"data": StepStatus.NOT_RUN, "verl-train": StepStatus.NOT_RUN, "merge": StepStatus.NOT_RUN,
             "evaluate": StepStatus.NOT_RUN}
    summary: dict[str, Any] = {"name": cfg.name, "out_dir": str(out), "mlflow_uri": uri, "steps": steps,
                               "checkpoints": {}}
    current = "data"
    with tracked_run(uri, cfg.experiment, cfg.name, cfg, kind="cluster-pipeline") as parent:
        summary["parent_run_id"] = parent.run_id
        try:
            data = None
            if cfg.data.enabled:
                with tracked_run(uri, cfg.experiment, "data", cfg.data, kind="data",
                                 parent_run_id=parent.run_id) as run:
                    data = data_task(cfg)
                    run.set_tags({"dvc.md5": data["md5"], "envace.inputs": str(data["hashes"])})
                steps["data"] = StepStatus.DONE
                summary["data"] = data
            current = "verl-train"
            launch = None
            if cfg.train.mode is not TrainMode.SKIP:
                with tracked_run(uri, cfg.experiment, "verl-train", {"train": cfg.train.model_dump(mode="json")},
                                 kind="train", parent_run_id=parent.run_id, tags={"envace.backend": "verl"}) as run:
                    summary["train"] = train_task(cfg, data, run.run_id)
                    run.set_tags({"envace.train_mode": cfg.train.mode.value})
                launch = summary["train"]
            steps["verl-train"] = StepStatus.DONE
            if cfg.train.mode is TrainMode.DRY_RUN and not cfg.checkpoints:
                logger.info("train.mode=dry_run: the verl command composed; no checkpoints= to merge")
                return _finish(cfg, summary, parent)
            current = "merge"
            root = checkpoint_root(cfg, launch)
            ckpts = find_checkpoints(root, cfg.steps)
            if not ckpts:
                raise FileNotFoundError(f"no global_step_N/actor checkpoint under {root}")
            merged = {}
            for ckpt in ckpts:
                target = out / "merged" / f"global_step_{ckpt.step}"
                merged[ckpt.step] = merge_task.with_options(task_run_name=f"merge[step {ckpt.step}]")(
                    ckpt, str(target), str(out / "logs" / f"merge_step_{ckpt.step}.log"))
                summary["checkpoints"][ckpt.step] = {"merged": merged[ckpt.step]}
            steps["merge"] = StepStatus.DONE
            current = "evaluate"
            for ckpt in ckpts:
                with tracked_run(uri, cfg.experiment, f"eval-step-{ckpt.step}",
                                 {"step": ckpt.step, "eval": cfg.eval.model_dump(mode="json")}, kind="eval",
                                 parent_run_id=parent.run_id, tags={"envace.step": ckpt.step},
                                 input_paths=[merged[ckpt.step]["target"]]) as run:
                    ev = eval_task.with_options(task_run_name=f"evaluate[step {ckpt.step}]")(
                        cfg, merged[ckpt.step]["target"], ckpt.step)
                    run.log_step_metrics(ckpt.step, ev["metrics"])
                    if ev.get("results_file"):
                        run.log_artifact(ev["results_file"], "eval")
                parent.log_step_metrics(ckpt.step, ev["metrics"])  # the evaluation curve over training steps
                summary["checkpoints"][ckpt.step].update({"eval": ev, "mlflow_run_id": run.run_id})
            steps["evaluate"] = StepStatus.DONE
        except Exception as exc:  # noqa: BLE001 - recorded, then re-raised naming the step
            steps[current] = StepStatus.FAILED
            error = f"{type(exc).__name__}: {exc}"
            summary.update({"stopped_at": current, "error": error})
            parent.set_tags({"envace.stopped_at": current})
            parent.mark_failed(f"stopped at {current}: {error}")
            write_summary(cfg, summary)
            logger.error("cluster pipeline stopped at step %s: %s", current, error)
            raise PipelineStopped(current, error) from exc
        return _finish(cfg, summary, parent)


def _finish(cfg: ClusterPipelineConfig, summary: dict[str, Any], parent: Any) -> dict[str, Any]:
    summary["stopped_at"] = None
    path = write_summary(cfg, summary)
    parent.log_artifact(path, "pipeline")
    return summary
