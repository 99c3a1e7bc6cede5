"""The full pipeline as a Prefect flow: tool-world data → tiny model → SFT cold start → RL (EnvACE by
default, any TrainConfig YAML) → evaluation of the final checkpoint. Each task runs one step function of
envace.pipeline (the ones the DVC stages and `envace demo` run); this file only orders them and adds the
MLflow parent run `pipeline`, which holds the training and evaluation runs as children. Everything lands
under `out_dir` (envace.pipeline.Layout.under: data/, models/tiny, sft/, rl/, eval/, mlflow/).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger, task

from envace import pipeline as steps
from envace.tracking.locations import Kind, locations
from envace.tracking.run_record import tracked_run
from envace_flows.evaluate import evaluate_checkpoint


@task(name="export-world")
def data_task(out_dir: str, counts: dict[str, int], seed: int) -> dict[str, Any]:
    return steps.build_data(out_dir, counts, seed)


@task(name="init-tiny-model")
def init_model_task(out_dir: str, corpus_tasks: int, overrides: list[str]) -> str:
    return str(steps.build_model(out_dir, corpus_tasks, steps.model_config(overrides)))


@task(name="sft")
def sft_task(cfg: Any) -> dict[str, Any]:
    return steps.run_sft(cfg)


@task(name="train-embedded")
def rl_task(cfg: Any) -> dict[str, Any]:
    return steps.run_rl(cfg)


@flow(name="pipeline")
def full_pipeline(out_dir: str = "runs/pipeline", counts: dict[str, int] | None = None, data_seed: int = 0,
                  corpus_tasks: int = 400, model_overrides: list[str] | None = None,
                  sft_overrides: list[str] | None = None, train_config: str | None = "configs/train/envace.yaml",
                  train_overrides: list[str] | None = None, eval_overrides: list[str] | None = None,
                  benchmarks: list[str] | None = None, mlflow_uri: str | None = None,
                  experiment: str = "envace-pipeline") -> dict[str, Any]:
    """Run every stage once; returns each stage's output (paths, SFT summary, train result, eval result)."""
    logger = get_run_logger()
    layout = steps.Layout.under(Path(out_dir).resolve())
    uri = locations(out_dir, Kind.FLOW, mlflow_uri=mlflow_uri).mlflow_uri  # <out_dir>/mlflow/ by default
    counts = counts or {"train": 400, "val": 50, "test": 50}
    data = data_task(str(layout.data), counts, data_seed)
    model = init_model_task(str(layout.model), corpus_tasks, model_overrides or [])
    sft_out = sft_task(steps.sft_config(layout, sft_overrides or []))
    with tracked_run(uri, experiment, "pipeline", {"out_dir": str(Path(out_dir).resolve()), "counts": counts,
                                                   "data_seed": data_seed, "train_config": train_config},
                     kind="pipeline", input_paths=[str(layout.train_json)]) as parent:
        train_cfg = steps.rl_config(layout, train_config, train_overrides or [],
                                    tracking={"mlflow_uri": uri, "experiment": experiment,
                                              "parent_run_id": parent.run_id})
        trained = rl_task(train_cfg)
        evaluated = evaluate_checkpoint(trained["checkpoint"], benchmarks or ["world"],
                                        steps.eval_overrides(layout, eval_overrides or []),
                                        out_dir=str(layout.eval), mlflow_uri=uri, experiment=experiment,
                                        parent_run_id=parent.run_id)
        world = evaluated["results"].get("world", {}).get("world", {})
        parent.log_step_metrics(0, {f"eval/world/{k}": world[k] for k in ("success", "reward") if k in world})
    logger.info("pipeline done: checkpoint %s, world success %s; MLflow parent run %s in %s",
                trained["checkpoint"], world.get("success"), parent.run_id, uri)
    return {"data": data, "model": model, "sft": sft_out, "train": trained, "eval": evaluated,
            "mlflow_run_id": parent.run_id, "mlflow_uri": uri}
