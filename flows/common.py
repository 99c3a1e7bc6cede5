"""Shared flow machinery: the sweep-cell task and the sweep body used by the ablation and TTS flows.

Behaviour (each choice is Prefect's own mechanism, not a re-implementation):
- **Caching.** The cell task has `cache_key_fn` = `envace.sweeps.cells.cell_cache_key` (resolved config
  digest + input data hashes + code version) and persists its result as JSON in
  `<sweep out_dir>/.prefect-results/<key>`. Prefect 3 looks cached results up in that storage, not in
  its database, so a re-run in a new process (or against another Prefect server) skips finished cells.
  A failed cell stores nothing and runs again next time.
- **Failure isolation.** Cells are submitted as task runs and their final states are collected; a
  failed cell is reported by name (with its error) and never stops the others. The flow itself
  completes; its summary carries `failed`.
- **Concurrency.** The flow opens its own task runner sized by the sweep config (`max_workers`), so
  the limit holds in ephemeral mode without any server-side setup. With `max_workers: 1` cells run one
  after another in the flow's process (`ThreadPoolTaskRunner(1)`). With more, cells run in a
  `ProcessPoolTaskRunner`: model loading in transformers and torch's thread settings are process-global
  and not thread-safe (two training cells in threads of one process fail with meta-tensor and lazy-
  import errors), so parallel cells need separate processes. `task_runner: threads` forces threads
  (e.g. evaluations against a remote endpoint). Cell task runs also carry the tag `envace-cell`: with a
  Prefect server, `prefect concurrency-limit create envace-cell N` additionally caps cells across
  concurrent flow runs that share one machine. `runner: {kind: ray, address, num_cpus, num_gpus}` sends
  each cell to a Ray cluster instead, as its own Ray task with that resource request (prefect-ray's
  task runner; envace.sweeps.ray_runner), with the same caching, retries and MLflow runs.
- **Retries.** A cell whose config names an endpoint (an http(s) URL: judge, user simulator, remote
  model) retries `sweep.retries` times with exponential backoff; local cells fail fast.
- **Progress.** A log line per finished cell and a Prefect progress artifact; at the end a Prefect
  table artifact with the mean ± 95 % CI table.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

from prefect import get_run_logger, task
from prefect.artifacts import (
    create_markdown_artifact,
    create_progress_artifact,
    create_table_artifact,
    update_progress_artifact,
)
from prefect.cache_policies import NO_CACHE
from prefect.futures import as_completed
from prefect.task_runners import ProcessPoolTaskRunner, ThreadPoolTaskRunner
from prefect.tasks import exponential_backoff

from envace.cpu_threads import cpu_jobs
from envace.secrets import mask_text
from envace.sweeps.cells import calls_endpoint, cell_cache_key, resolve_cell_config, run_cell
from envace.sweeps.curves import markdown_curves, sweep_curves, write_curves
from envace.sweeps.fidelity_seeds import fidelity_report, write_fidelity
from envace.sweeps.grid import CellSpec, SweepConfig, expand_cells, slugify
from envace.sweeps.outcomes import write_records
from envace.sweeps.paired_report import markdown_paired, paired_report
from envace.sweeps.preflight import preflight
from envace.sweeps.prepare import SFTSpec, build_sft, parallel_threads
from envace.sweeps.ray_runner import RunnerKind, cell_resources, ray_task_runner
from envace.sweeps.results import cells_frame, log_results, markdown_table, summarize, sweep_parent_run, write_results
from envace.sweeps.termination import stop_cells_on_sigterm
from envace.sweeps.world_model import (
    gain_tracking,
    markdown_tracking,
    markdown_world_models,
    prepare_worldbench,
    world_model_report,
    write_world_models,
)

CELL_TAG = "envace-cell"
RESULT_DIR = ".prefect-results"


@task(name="sweep-cell", tags=[CELL_TAG], persist_result=True, result_serializer="json")
def cell_task(spec: CellSpec) -> dict[str, Any]:
    logger = get_run_logger()
    logger.info("cell %s: running in %s", spec.name, spec.out_dir)
    record = run_cell(spec)
    logger.info("cell %s: done in %.1f s; %s", spec.name, record["wall_s"], _short(record["metrics"]))
    return record


@task(name="sft-checkpoint", cache_policy=NO_CACHE)
def sft_task(name: str, spec: SFTSpec, threads: int | None = None) -> dict[str, Any]:
    """Build (or reuse: key file in the checkpoint dir, see envace.sweeps.prepare) one SFT checkpoint."""
    info = build_sft(spec, threads=threads)
    get_run_logger().info("SFT %s: %s in %.0f s -> %s", name, "cached" if info["cached"] else "built",
                          info["wall_s"], info["model"])
    return info


def prepare_sft(cfg: SweepConfig) -> dict[str, dict[str, Any]]:
    """The sweep's SFT checkpoints, built before any cell (in parallel up to max_workers); raises if one fails,
    since the cells that start from it could not run."""
    if not cfg.sft:
        return {}
    # builds running side by side on this machine split its cores; on Ray each gets its cell's CPUs
    threads = (max(1, int(cfg.runner.num_cpus)) if cfg.runner.kind is RunnerKind.RAY
               else parallel_threads(len(cfg.sft_builds()), cfg.max_workers))
    with cpu_jobs(cell_processes(cfg)), cell_runner(cfg) as runner:
        with cell_resources(cfg.runner):
            futures = {name: runner.submit(sft_task.with_options(task_run_name=f"sft[{name}]"),
                                           {"name": name, "spec": spec, "threads": threads})
                       for name, spec in cfg.sft_builds().items()}
        return {name: fut.result() for name, fut in futures.items()}


def _cell_cache_key(context: Any, parameters: dict[str, Any]) -> str | None:
    try:
        return cell_cache_key(parameters["spec"])
    except Exception:  # noqa: BLE001 - an unresolvable cell is not cached; it fails with its real error
        return None


def _short(metrics: dict[str, float], keep: int = 4) -> str:
    items = list(metrics.items())[:keep]
    return ", ".join(f"{k}={v:.3f}" for k, v in items) or "no metrics"


def artifact_key(text: str) -> str:
    """Prefect artifact keys allow lowercase letters, digits and dashes only."""
    return "".join(c if c.isalnum() else "-" for c in slugify(text).lower()).strip("-") or "sweep"


def is_remote(spec: CellSpec) -> bool:
    try:
        return calls_endpoint(resolve_cell_config(spec))
    except Exception:  # noqa: BLE001 - an invalid config fails inside its cell, where it is reported
        return False


def configured_cell_task(cfg: SweepConfig, spec: CellSpec):
    opts: dict[str, Any] = {"task_run_name": f"cell[{spec.name}]",
                            "result_storage": Path(cfg.out_dir) / RESULT_DIR}
    if cfg.cache:
        opts["cache_key_fn"] = _cell_cache_key
    else:
        opts["cache_policy"] = NO_CACHE
    if cfg.retries and is_remote(spec):
        opts.update(retries=cfg.retries, retry_delay_seconds=exponential_backoff(backoff_factor=cfg.retry_backoff_s),
                    retry_jitter_factor=0.2)
    return cell_task.with_options(**opts)


def task_runner_for(max_workers: int, kind: str = "auto"):
    """Threads for one worker (in-process), processes for several (see the module docstring)."""
    if kind == "auto":
        kind = "processes" if max_workers > 1 else "threads"
    if kind == "processes":
        return ProcessPoolTaskRunner(max_workers=max_workers)
    return ThreadPoolTaskRunner(max_workers=max_workers)


def cell_processes(cfg: SweepConfig) -> int | None:
    """Cell processes side by side on this machine (each takes that share of its cores, envace.cpu_threads);
    None when cells run in this process or on Ray (which gives each its own CPUs)."""
    if cfg.runner.kind is RunnerKind.RAY:
        return None
    kind = cfg.task_runner if cfg.task_runner != "auto" else ("processes" if cfg.max_workers > 1 else "threads")
    return cfg.max_workers if kind == "processes" else None


def cell_runner(cfg: SweepConfig):
    """The sweep's task runner: a Ray cluster (`runner.kind: ray`, envace.sweeps.ray_runner) or this machine."""
    if cfg.runner.kind is RunnerKind.RAY:
        return ray_task_runner(cfg.runner)
    return task_runner_for(cfg.max_workers, cfg.task_runner)


class CellStatus(str, Enum):
    COMPLETED = "completed"  # ran in this flow run
    CACHED = "cached"  # a finished result with the same cache key was reused
    FAILED = "failed"  # raised (after its retries); reported by name, never stops the others


@dataclass
class CellOutcome:
    spec: CellSpec
    status: CellStatus
    record: dict[str, Any] | None = None
    error: str | None = None


def _error_text(fut: Any) -> str:
    exc = fut.result(raise_on_failure=False)
    if isinstance(exc, BaseException):
        return f"{type(exc).__name__}: {exc}"
    return fut.state.message or fut.state.name


def run_cells(cfg: SweepConfig, cells: list[CellSpec]) -> list[CellOutcome]:
    """Submit every cell, wait for all, return outcomes in cell order (never raises for a cell)."""
    logger = get_run_logger()
    progress = create_progress_artifact(0.0, description=f"sweep {cfg.name}: % of {len(cells)} cells finished")
    outcomes: dict[str, CellOutcome] = {}
    with cpu_jobs(cell_processes(cfg)), cell_runner(cfg) as runner:
        futures = {}
        for spec in cells:
            with cell_resources(cfg.runner):  # on Ray: this cell's CPU / GPU request
                fut = runner.submit(configured_cell_task(cfg, spec), {"spec": spec})
            futures[fut.task_run_id] = (fut, spec)
        for done, fut in enumerate(as_completed([f for f, _ in futures.values()]), start=1):
            _, spec = futures[fut.task_run_id]
            fut.wait()  # sets the final state from the worker; `.state` alone may read a stale one from the API
            state = fut.state
            if state.is_completed():
                status = CellStatus.CACHED if state.name == "Cached" else CellStatus.COMPLETED
                outcome = CellOutcome(spec, status, record=fut.result())
                logger.info("[%d/%d] %s: %s; %s", done, len(cells), spec.name, status.value,
                            _short(outcome.record["metrics"]))
            else:
                outcome = CellOutcome(spec, CellStatus.FAILED, error=_error_text(fut))
                logger.error("[%d/%d] %s: FAILED: %s", done, len(cells), spec.name, outcome.error)
            outcomes[spec.name] = outcome
            update_progress_artifact(progress, progress=100.0 * done / len(cells))
    return [outcomes[s.name] for s in cells]


def _clean(value: Any) -> Any:
    return None if isinstance(value, float) and math.isnan(value) else value


def execute_sweep(cfg: SweepConfig) -> dict[str, Any]:
    """The body of every sweep flow: parent run, cells, results table, artifacts, summary."""
    preflight(cfg)  # size and every cell's config checked before anything runs (envace.sweeps.preflight)
    stop_cells_on_sigterm(cfg.out_dir)  # a SIGTERM stops the running cells, KILLED (envace.sweeps.termination)
    logger = get_run_logger()
    out = Path(cfg.out_dir).resolve()
    cfg = cfg.model_copy(update={"out_dir": str(out)})
    out.mkdir(parents=True, exist_ok=True)
    with sweep_parent_run(cfg) as parent:
        sft_info = prepare_sft(cfg)
        wb_info = prepare_worldbench(cfg.worldbench, out) if cfg.worldbench is not None else None
        if wb_info is not None:
            logger.info("worldbench data: %s (%s, %.0f s)", wb_info["data"],
                        "cached" if wb_info["cached"] else "built", wb_info["wall_s"])
        cells = expand_cells(cfg, parent.run_id)
        where = (f"Ray cluster {cfg.runner.resolved_address()}, {cfg.runner.num_cpus:g} CPU / {cfg.runner.num_gpus:g} "
                 f"GPU per cell" if cfg.runner.kind is RunnerKind.RAY
                 else f"{cfg.max_workers} at a time ({type(cell_runner(cfg)).__name__})")
        logger.info("sweep %s: %d cells on %s; MLflow parent run %s in %s", cfg.name, len(cells), where,
                    parent.run_id, mask_text(cfg.resolved_mlflow_uri()))
        outcomes = run_cells(cfg, cells)
        records = [o.record for o in outcomes if o.record is not None]
        failed = {o.spec.name: o.error for o in outcomes if o.status is CellStatus.FAILED}
        axes = list(cfg.axes)
        table = summarize(records, axes, cfg.default_metrics())
        summary = {
            "sweep": cfg.name, "out_dir": str(out), "parent_run_id": parent.run_id,
            "mlflow_uri": mask_text(cfg.resolved_mlflow_uri()), "experiment": cfg.experiment,
            "cells": {o.spec.name: o.status.value for o in outcomes},
            "executed": [o.spec.name for o in outcomes if o.status is CellStatus.COMPLETED],
            "cached": [o.spec.name for o in outcomes if o.status is CellStatus.CACHED],
            "failed": failed,
            "sft": sft_info,
            "worldbench": wb_info,
            "child_runs": {o.spec.name: o.record.get("mlflow_run_id") for o in outcomes if o.record},
            "table": [{k: _clean(v) for k, v in row.items()} for row in table.to_dict("records")],
        }
        # seed-level paired comparisons (vs base, vs the reference level, the sweep's contrasts), one table per pass
        paired = paired_report(records, contrasts=cfg.contrast_groups())
        summary["paired"] = [{k: _clean(v) for k, v in row.items()} for row in paired.to_dict("records")]
        world = tracking = None
        if cfg.worldbench is not None:  # task gain vs world-model gain per arm, against its base row
            world = world_model_report(records, n_boot=cfg.worldbench.n_boot)
            tracking = gain_tracking(records, n_boot=cfg.worldbench.n_boot)
            summary["world_models"] = [{k: _clean(v) for k, v in row.items()} for row in world.to_dict("records")]
            summary["world_model_tracking"] = {k: _clean(v) for k, v in tracking.items() if k != "points"}
            summary["world_models_csv"] = str(out / "results" / "world_models.csv")
        paths = write_results(out / "results", cells_frame(records, axes), table, summary, cfg.name)
        if not paired.empty:
            paths["paired.csv"] = out / "results" / "paired.csv"
            paired.to_csv(paths["paired.csv"], index=False)
        # the records `envace sweep export` turns into compact outcome files for a re-analysis without training
        paths["records.json"] = write_records(out / "results", records, out_dir=out, contrasts=cfg.contrast_groups())
        if world is not None:
            paths.update(write_world_models(out / "results", world, tracking))
            fidelity = fidelity_report(records)  # seed-level fidelity, the arms' order
            paths.update(write_fidelity(out / "results", fidelity))
        curves = sweep_curves(records, cfg.resolved_mlflow_uri())  # per-arm training curves, seeds pooled
        if not curves.empty:
            paths.update(write_curves(out / "results", curves, cfg.name))
        if "tts.n" in axes and "tts.mode" in axes:  # TTS sweep: table per mode and the score-vs-N plot
            from envace.sweeps.tts_report import write_tts_report

            paths.update(write_tts_report(out / "results", table))
        summary["results_csv"] = str(paths["results.csv"])
        log_results(parent, paths, cfg.artifact_dir, failed)
        if failed:  # the parent run ends FAILED, not FINISHED, when any cell failed
            parent.mark_failed(f"{len(failed)} of {len(outcomes)} cells failed: {', '.join(sorted(failed))}")
    key = artifact_key(cfg.name)
    create_table_artifact(table=summary["table"], key=f"{key}-results",
                          description=f"sweep {cfg.name}: mean ± 95% CI over seeds {cfg.seeds}")
    failures = "\n".join(f"- **{name}**: {err}" for name, err in failed.items()) or "none"
    create_markdown_artifact(f"## {cfg.name}\n\n{markdown_table(table)}\n\n### Paired comparisons (seed level)\n"
                             f"{markdown_paired(paired)}\n\n"
                             + (f"### Task gain vs world-model gain\n{markdown_world_models(world)}\n\n"
                                f"{markdown_tracking(tracking)}\n\n### Fidelity at the seed level\n"
                                f"{fidelity[2]}\n\n" if world is not None else "")
                             + (f"### Training curves\n{markdown_curves(curves)}\n\n" if not curves.empty else "")
                             + f"### Failed cells\n{failures}\n",
                             key=f"{key}-summary", description=f"sweep {cfg.name} summary")
    if failed:
        logger.error("sweep %s: %d of %d cells failed: %s", cfg.name, len(failed), len(outcomes), ", ".join(failed))
    logger.info("sweep %s: %d executed, %d cached, %d failed; results in %s", cfg.name, len(summary["executed"]),
                len(summary["cached"]), len(failed), paths["results.csv"])
    return summary
