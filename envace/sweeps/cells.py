"""Running one sweep cell: resolve its config, call the trainer (then the evaluator) or the evaluator,
and return a JSON-able record of its metrics and MLflow child run.

- `kind: train`: `envace.trainers.embedded.train` with `tracking.parent_run_id` set, so the trainer's own
  MLflow run is the cell's child run; with `eval_overrides`, the final checkpoint is then evaluated on
  the tool world with the real environment and those metrics (`eval/...`) are logged into the same
  child run at the last training step.
- `kind: eval`: one MLflow child run wrapping `envace.evaluation.run.run_eval` (the TTS sweep's cells).
- either kind, when the sweep has `worldbench:`: the cell's world model (the final checkpoint's, or the
  evaluated model) is scored on worldbench (envace.sweeps.world_model) and `worldbench/...` joins its
  metrics, logged into the same child run.

A training cell resumes from its own latest checkpoint when it runs again with the same cache key (a
crash, a retry); when the key changed (new code, new input data), the old checkpoints belong to another
experiment and are removed first, so the cell trains from scratch (`prepare_cell_dir`).

Every execution appends `start` and `end` events to `<cell out_dir>/executions.jsonl`: the audit trail
of how often a cell really ran (a cached cell does not run, so it writes nothing), and where: the start
event's `placement` names the Ray node and the resources Ray gave the cell when it ran on a cluster.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from envace.config import BaseConfig, flatten, load_config
from envace.sweeps.cache import cache_key
from envace.sweeps.curves import metric_history
from envace.sweeps.grid import DEFAULT_PASS, CellSpec

EXECUTIONS = "executions.jsonl"
KEY_FILE = "cell_key"
_LOG_LOCK = threading.Lock()


def resolve_cell_config(spec: CellSpec, *, for_key: bool = False) -> BaseConfig:
    """The cell's validated TrainConfig / EvalConfig. `for_key` leaves out the parent run id (a re-run
    of the sweep under a new parent run is still the same experiment)."""
    parent = None if for_key else spec.parent_run_id
    if spec.kind == "train":
        from envace.trainers.config import TrainConfig

        return load_config(TrainConfig, spec.base, spec.all_overrides(), out_dir=spec.out_dir, progress=False,
                           tracking={"enabled": True, "mlflow_uri": spec.mlflow_uri, "experiment": spec.experiment,
                                     "store_url": spec.store_url, "parent_run_id": parent})
    from envace.evaluation.config import EvalConfig

    return load_config(EvalConfig, spec.base, spec.all_overrides(), out_dir=spec.out_dir)


def cell_cache_key(spec: CellSpec) -> str:
    """Cache key of a sweep cell (raises like the cell would when its config is invalid)."""
    cfg = resolve_cell_config(spec, for_key=True)
    extra: dict[str, Any] = {"eval": spec.eval_overrides}
    if spec.extra_evals:  # only then: the keys of sweeps without extra passes are unchanged
        extra["extra_evals"] = spec.extra_evals
    if spec.worldbench_data is not None:  # only then: the keys of sweeps without worldbench are unchanged
        from envace.sweeps.world_model import data_key

        extra["worldbench"] = {"score": spec.worldbench_score, "data": data_key(spec.worldbench_data)}
    return cache_key(spec.kind, cfg, extra=extra)


def calls_endpoint(cfg: BaseConfig | Mapping[str, Any]) -> bool:
    """Whether a resolved config names a remote endpoint (any http(s) URL: judge, user simulator,
    remote model). Such steps get retries with backoff; purely local ones fail fast."""
    flat = cfg.flat() if isinstance(cfg, BaseConfig) else flatten(cfg)
    return any(isinstance(v, str) and v.startswith(("http://", "https://")) for v in flat.values())


def eval_metrics(result: Mapping[str, Any], prefix: str = "eval") -> dict[str, float]:
    """Numeric leaves of a `run_eval` result as `eval/world/success`, `eval/world/fidelity/exact_match`,
    `eval/<benchmark>/...` (lists such as per-seed scores and booleans are left out)."""
    out: dict[str, float] = {}
    for key, value in flatten({k: v for k, v in result.items() if k in ("world", "benchmarks")}, sep="/").items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or "/per_task/" in f"/{key}/":
            continue
        key = key.removeprefix("benchmarks/")
        out[f"{prefix}/{key}"] = float(value)
    if isinstance(result.get("wall_s"), (int, float)):
        out[f"{prefix}/wall_s"] = float(result["wall_s"])
    return out


def train_metrics(history: list[Mapping[str, float]], last_step: int, tail: int = 5) -> dict[str, float]:
    """`train/reward_last`: mean training reward over the last `tail` logged steps (one step is noisy)."""
    rewards = [h["reward/mean"] for h in history if h.get("reward/mean") is not None][-tail:]
    out = {"train/steps": float(last_step)}
    if rewards:
        out["train/reward_last"] = sum(rewards) / len(rewards)
    return out


def logged_history(mlflow_uri: str | None, run_id: str | None) -> list[dict[str, float]]:
    """Every step's `reward/mean` as the MLflow run holds it. A cell resumed after a kill trains only the
    steps after its last checkpoint, so its in-process history is a tail; the summary comes from the run,
    which holds every step once (re-run steps are not logged twice), so cell and MLflow agree."""
    points = metric_history(mlflow_uri, run_id, "reward/mean")
    return [{"step": float(k), "reward/mean": v} for k, v in sorted(points.items())]


@contextmanager
def execution_record(spec: CellSpec) -> Iterator[None]:
    """Append start/end events of one execution to the cell's executions.jsonl."""
    path = Path(spec.out_dir) / EXECUTIONS
    path.parent.mkdir(parents=True, exist_ok=True)
    started = time.time()

    def write(event: dict[str, Any]) -> None:
        with _LOG_LOCK, path.open("a") as f:
            f.write(json.dumps({"cell": spec.name, "pid": os.getpid(), **event}) + "\n")

    from envace.sweeps.ray_runner import placement

    write({"event": "start", "t": started, "placement": placement()})
    status = "error"
    try:
        yield
        status = "ok"
    finally:
        write({"event": "end", "t": time.time(), "start": started, "status": status})


def executions(out_dir: str | Path) -> list[dict[str, Any]]:
    """The execution events of a cell directory (empty when it never ran)."""
    path = Path(out_dir) / EXECUTIONS
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def prepare_cell_dir(out_dir: str | Path, key: str) -> bool:
    """Record `key` in the cell dir; remove checkpoints written under another key. True if removed."""
    import shutil

    d = Path(out_dir)
    d.mkdir(parents=True, exist_ok=True)
    marker = d / KEY_FILE
    stale = marker.is_file() and marker.read_text().strip() != key
    if stale and (d / "checkpoints").exists():
        shutil.rmtree(d / "checkpoints")
    marker.write_text(key + "\n")
    return stale


def _record(spec: CellSpec, metrics: dict[str, float], run_id: str | None, t0: float, **extra: Any) -> dict[str, Any]:
    record = {"cell": spec.name, "group": spec.group, "levels": dict(spec.levels), "seed": spec.seed,
              "kind": spec.kind, "out_dir": spec.out_dir, "mlflow_run_id": run_id, "metrics": metrics,
              "wall_s": time.perf_counter() - t0, **extra}
    if spec.sft_seed is not None:
        record["sft_seed"] = spec.sft_seed
    if extra.get("eval_file"):
        record["eval_files"] = {DEFAULT_PASS: extra["eval_file"], **record.get("eval_files", {})}
    return record


def _extra_passes(spec: CellSpec, base_overrides: list[str], model: str) -> tuple[dict[str, float], dict[str, str]]:
    """The cell's `extra_evals` passes of `model`: their metrics (eval_<name>/...) and result files."""
    from envace.evaluation.config import EvalConfig
    from envace.evaluation.run import run_eval

    metrics: dict[str, float] = {}
    files: dict[str, str] = {}
    for name, overrides in spec.extra_evals.items():
        ecfg = load_config(EvalConfig, None, [*base_overrides, *overrides], model=model, seeds=[spec.seed],
                           out_dir=str(Path(spec.out_dir) / f"eval_{name}"))
        ev = run_eval(ecfg)
        metrics.update(eval_metrics(ev, prefix=f"eval_{name}"))
        if ev.get("written_to"):
            files[name] = ev["written_to"]
    return metrics, files


def _log_into_run(mlflow_uri: str, run_id: str, step: int, metrics: dict[str, float], result_file: str | None,
                  artifact_dir: str = "eval") -> None:
    from mlflow.tracking import MlflowClient

    from envace.tracking.mlflow_run import MlflowRun, resolve_tracking_uri

    uri, _ = resolve_tracking_uri(mlflow_uri)
    client = MlflowClient(tracking_uri=uri)
    run = MlflowRun(client, run_id, client.get_run(run_id).info.experiment_id)
    run.log_step_metrics(step, metrics)
    if result_file and Path(result_file).is_file():
        run.log_artifact(result_file, artifact_dir)


def _run_train_cell(spec: CellSpec, t0: float) -> dict[str, Any]:
    from envace.evaluation.config import EvalConfig
    from envace.evaluation.run import run_eval
    from envace.trainers.checkpoint import latest_checkpoint
    from envace.trainers.embedded import train


    cfg = resolve_cell_config(spec)
    prepare_cell_dir(cfg.out_dir, cell_cache_key(spec))
    res = train(cfg)
    ckpt = res.checkpoint
    if ckpt is None:  # resumed at the final step: nothing was trained, the last checkpoint is the result
        latest = latest_checkpoint(Path(cfg.out_dir) / "checkpoints")
        ckpt = latest.path if latest else None
    metrics = train_metrics(logged_history(spec.mlflow_uri, res.mlflow_run_id) or res.history, res.last_step)
    extra: dict[str, Any] = {"checkpoint": str(ckpt) if ckpt else None, "start_model": str(cfg.model)}
    if spec.eval_overrides is not None:
        if ckpt is None:
            raise RuntimeError(f"cell {spec.name}: training wrote no checkpoint under {cfg.out_dir}/checkpoints; "
                               f"nothing to evaluate (delete the cell directory to retrain)")
        ecfg = load_config(EvalConfig, None, spec.eval_overrides, model=str(ckpt), seeds=[spec.seed],
                           out_dir=str(Path(spec.out_dir) / "eval"))
        ev = run_eval(ecfg)
        em = eval_metrics(ev)
        metrics.update(em)
        extra["eval_file"] = ev.get("written_to")
        xm, extra["eval_files"] = _extra_passes(spec, spec.eval_overrides, str(ckpt))
        metrics.update(xm)
        if res.mlflow_run_id:
            _log_into_run(spec.mlflow_uri, res.mlflow_run_id, res.last_step, em | xm, ev.get("written_to"))
            for name, path in extra["eval_files"].items():
                _log_into_run(spec.mlflow_uri, res.mlflow_run_id, res.last_step, {}, path, f"eval_{name}")
    if spec.worldbench_data is not None:
        if ckpt is None:
            raise RuntimeError(f"cell {spec.name}: training wrote no checkpoint under {cfg.out_dir}/checkpoints; "
                               f"no world model to score (delete the cell directory to retrain)")
        wm, extra["worldbench_file"] = _worldbench(spec, ckpt)
        metrics.update(wm)
        if res.mlflow_run_id:
            _log_into_run(spec.mlflow_uri, res.mlflow_run_id, res.last_step, wm, extra["worldbench_file"])
    return _record(spec, metrics, res.mlflow_run_id, t0, **extra)


def _worldbench(spec: CellSpec, model: str | Path) -> tuple[dict[str, float], str]:
    from envace.sweeps.world_model import score_world_model

    assert spec.worldbench_data is not None
    return score_world_model(model, spec.worldbench_data, spec.worldbench_score, Path(spec.out_dir) / "worldbench")


def _run_eval_cell(spec: CellSpec, t0: float) -> dict[str, Any]:
    from envace.evaluation.run import run_eval
    from envace.tracking.run_record import RunRecord

    cfg = resolve_cell_config(spec)
    inputs = [p for p in (cfg.model, cfg.data.path) if p]
    with RunRecord(spec.locations()) as record:
        run = record.start_mlflow(spec.experiment, spec.name, cfg, kind="eval", parent_run_id=spec.parent_run_id,
                                  tags={"envace.cell": spec.name, "envace.group": spec.group}, input_paths=inputs)
        ev = run_eval(cfg)
        metrics = eval_metrics(ev)
        model = str(getattr(cfg.policy, "model_dir", None) or cfg.model)
        extra: dict[str, Any] = {}
        if spec.extra_evals:
            base = [o for o in spec.overrides if not o.startswith("model=")]
            xm, extra["eval_files"] = _extra_passes(spec, base, model)
            metrics.update(xm)
            for name, path in extra["eval_files"].items():
                run.log_artifact(path, f"eval_{name}")
        if spec.worldbench_data is not None:
            wm, extra["worldbench_file"] = _worldbench(spec, model)
            metrics.update(wm)
            run.log_artifact(extra["worldbench_file"], "worldbench")
        run.log_step_metrics(0, metrics)
        if ev.get("written_to"):
            run.log_artifact(ev["written_to"], "eval")
    return _record(spec, metrics, run.run_id, t0, eval_file=ev.get("written_to"), start_model=model, **extra)


def run_cell(spec: CellSpec) -> dict[str, Any]:
    """Run one cell (train [+ eval], or eval) and return its record: cell, group, levels, seed,
    mlflow_run_id, metrics {name: float}, out_dir, wall_s."""
    t0 = time.perf_counter()
    with execution_record(spec):
        if spec.kind == "train":
            return _run_train_cell(spec, t0)
        return _run_eval_cell(spec, t0)
