"""The full pipeline flow on the embedded backend: tool-world data → tiny model → SFT cold start → RL
(EnvACE by default, any TrainConfig YAML) → evaluation of the final checkpoint. Everything lands under
`out_dir` (data/, models/tiny, sft/, rl/, eval/, mlflow/); one MLflow parent run `pipeline` holds the
training and evaluation runs as children. The same stages as dvc.yaml, as a Prefect flow.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger, task

from envace.config import load_config
from envace.trainers.config import SFTConfig, TrainConfig
from envace.tracking.mlflow_run import start_run
from flows.data import export_task
from flows.evaluate import evaluate_checkpoint
from flows.train import sft_task, train_task


@task(name="init-tiny-model")
def init_model_task(out_dir: str, corpus_tasks: int, overrides: list[str]) -> str:
    from envace.models.corpus import world_corpus
    from envace.models.tiny import TinyModelConfig, init_tiny_model

    cfg = load_config(TinyModelConfig, None, overrides)
    return str(init_tiny_model(world_corpus(corpus_tasks, seed=cfg.seed), out_dir, cfg))


@flow(name="pipeline")
def full_pipeline(out_dir: str = "runs/pipeline", counts: dict[str, int] | None = None, data_seed: int = 0,
                  corpus_tasks: int = 400, model_overrides: list[str] | None = None,
                  sft_overrides: list[str] | None = None, train_config: str | None = "configs/train/envace.yaml",
                  train_overrides: list[str] | None = None, eval_overrides: list[str] | None = None,
                  benchmarks: list[str] | None = None, mlflow_uri: str | None = None,
                  experiment: str = "envace-pipeline") -> dict[str, Any]:
    """Run every stage once; returns each stage's output (paths, SFT summary, train result, eval result)."""
    logger = get_run_logger()
    out = Path(out_dir).resolve()
    uri = mlflow_uri or str(out / "mlflow")
    counts = counts or {"train": 400, "val": 50, "test": 50}
    if not {"train", "test"} <= set(counts):
        raise ValueError(f"counts {counts} needs a 'train' and a 'test' split, e.g. {{'train': 400, 'test': 50}}")
    data = export_task(str(out / "data"), counts, data_seed)
    train_json, test_json = data["train"]["cm2"], data["test"]["cm2"]
    model = init_model_task(str(out / "models" / "tiny"), corpus_tasks, model_overrides or [])
    sft_cfg = load_config(SFTConfig, None, ["data.source=cm2", f"data.path={train_json}", *(sft_overrides or [])],
                          model=model, out_dir=str(out / "sft"))
    sft_out = sft_task(sft_cfg)
    with start_run(uri, experiment, "pipeline", {"out_dir": str(out), "counts": counts, "data_seed": data_seed,
                                                 "train_config": train_config},
                   tags={"envace.kind": "pipeline"}, input_paths=[train_json]) as parent:
        train_cfg = load_config(TrainConfig, train_config,
                                ["data.source=cm2", f"data.path={train_json}", *(train_overrides or [])],
                                model=str(out / "sft" / "model"), out_dir=str(out / "rl"),
                                tracking={"mlflow_uri": uri, "experiment": experiment, "parent_run_id": parent.run_id})
        trained = train_task(train_cfg)
        if not trained["checkpoint"]:
            raise RuntimeError(f"training in {out / 'rl'} wrote no checkpoint; delete the directory and run again")
        evaluated = evaluate_checkpoint(trained["checkpoint"], benchmarks or ["world"],
                                        ["data.source=cm2", f"data.path={test_json}", *(eval_overrides or [])],
                                        out_dir=str(out / "eval"), mlflow_uri=uri, experiment=experiment,
                                        parent_run_id=parent.run_id)
        world = evaluated["results"].get("world", {}).get("world", {})
        parent.log_step_metrics(0, {f"eval/world/{k}": world[k] for k in ("success", "reward") if k in world})
    logger.info("pipeline done: checkpoint %s, world success %s; MLflow parent run %s in %s",
                trained["checkpoint"], world.get("success"), parent.run_id, uri)
    return {"data": data, "model": model, "sft": sft_out, "train": trained, "eval": evaluated,
            "mlflow_run_id": parent.run_id, "mlflow_uri": uri}
