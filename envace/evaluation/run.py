"""`envace eval`: one checkpoint on the tool world and/or the benchmarks, optionally with test-time
rehearsal; results written as JSON beside the model (or to `out_dir`) and, when tracking is on, to one
MLflow run (metrics + the JSON as an artifact) and to the trajectory store, both one
`envace.tracking.run_record.RunRecord` at `envace.tracking.locations` (an eval job: MLflow in
`<out>/../mlflow`, the store in `<out>/store.db`, unless `tracking.*` names them).

Before any task: every setting and data path is checked without a model (roles.preflight), the output
folder is announced, and every endpoint slot answers one probe chat completion (probe.py); a failure
stops the run as one ConfigError. After the benchmarks, `results["failures"]` names each one that
measured nothing or whose judge failed too often (verdict.py); the caller chooses the exit status.

Store (envace.evaluation.eval_store): runs of kind `eval`, one per (checkpoint content hash, benchmark,
protocol) with a deterministic id, so a re-run of the same checkpoint × benchmark × seed adds no row. The
tool world's run holds its trajectories with mode `eval` (step = the seed, split = the task split, or
`<split>-fidelity` for the rehearse-mode pass; `tts-commit` / `tts-private` with test-time rehearsal);
each benchmark's run holds one trajectory per (set, task, attempt) with its messages, score and error.
The MLflow run is tagged with the checkpoint it scored (`envace.checkpoint.*`, `envace.train_run_id`).
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from envace.cpu_threads import apply_thread_policy
from envace.evaluation.config import EvalConfig
from envace.evaluation.eval_store import EvalStore
from envace.evaluation.world import evaluate_world
from envace.provenance.checkpoint_ref import CheckpointRef, model_dir_of
from envace.tracking.lifecycle import outcome_of
from envace.tracking.locations import Kind, locations
from envace.tracking.run_record import RunRecord


def resolve_model_dir(path: str | Path) -> Path:
    """A model dir, or a `step_*` checkpoint dir (its `policy/` or `act/` model)."""
    return model_dir_of(path)  # the same rule names the checkpoint in the store and in MLflow


def eval_out_dir(cfg: EvalConfig) -> Path:
    """Where eval.json goes: `out_dir`, else `eval_<model>` beside a local model, else runs/eval_<model>."""
    from envace.evaluation.roles import is_local

    if cfg.out_dir:
        return Path(cfg.out_dir)
    if is_local(cfg):
        model_dir = resolve_model_dir(cfg.policy.model_dir)
        return model_dir.parent / f"eval_{model_dir.name}"
    return Path("runs") / f"eval_{cfg.model_name()}"


def run_eval(cfg: EvalConfig, echo: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Run the evaluation; `echo` gets the lines a terminal shows as it starts (where results go, which
    endpoints answered the probe). `results["failures"]` lists each benchmark that did not measure a score
    (verdict.py); the caller decides the exit status."""
    from envace.data.tasks import load_tasks
    from envace.engines.factory import make_engine
    from envace.models.loading import load_policy, pick_device

    apply_thread_policy(cfg.threads)
    t0 = time.perf_counter()
    from envace.evaluation.probe import probe_endpoints
    from envace.evaluation.roles import bench_roles, describe_slots, is_local, preflight, used_slots

    say = echo or (lambda _line: None)
    device = torch.device(cfg.device) if cfg.device else pick_device()
    # the data and every slot / path are checked before a model is loaded, so a bad setting fails at once
    preflight(cfg)
    out = eval_out_dir(cfg)
    say(f"envace eval: {', '.join(cfg.benchmarks)}; results go to {out / 'eval.json'}")
    probed = probe_endpoints(used_slots(cfg))  # every endpoint answers once before any task runs
    if probed:
        say(f"envace eval: endpoints answered the probe: {', '.join(probed)}")
    tasks = load_tasks(cfg.data, split=cfg.split, n=cfg.n_tasks) if "world" in cfg.benchmarks else []
    engine = None
    if is_local(cfg):  # an endpoint policy has no local engine (world is refused for it by EvalConfig)
        model_dir = resolve_model_dir(cfg.policy.model_dir)
        model, tok = load_policy(model_dir, device=device)
        engine = make_engine(model, tok, device=device)
    else:
        model_dir = Path(cfg.model_name())
    results: dict[str, Any] = {"model": str(model_dir) if is_local(cfg) else cfg.policy.label(),
                               "models": describe_slots(cfg), "k": cfg.k, "seeds": list(cfg.seeds)}
    out.mkdir(parents=True, exist_ok=True)
    record = RunRecord(locations(out, Kind.EVAL, mlflow_uri=cfg.tracking.mlflow_uri,
                                 store_url=cfg.tracking.store_url)) if cfg.tracking.enabled else None
    try:
        store = EvalStore(cfg, model_dir, record) if record is not None else None
        if "world" in cfg.benchmarks:
            from envace.rollout.simulator_seat import simulator_engine

            simulator = (simulator_engine(cfg.simulator, str(device)) if cfg.simulator is not None and cfg.tts.on
                         else None)  # tts.engine=simulator: the private phase's prompted simulator
            results["world"] = evaluate_world(engine, tasks, cfg.rollout, k=cfg.k, seeds=cfg.seeds,
                                              with_fidelity=cfg.fidelity, tts=cfg.tts, simulator=simulator,
                                              on_trajectories=store.put if store else None)
        others = [b for b in cfg.benchmarks if b != "world"]
        if others:
            from envace.benchmarks.run import run_benchmarks

            # policy, user simulator and judge from their slots (envace.evaluation.roles); the user
            # simulator is its own policy object, never the TTS-wrapped one
            policy, user_sim, judge = bench_roles(cfg, str(device), engine, model_dir if engine else None)
            results["benchmarks"] = run_benchmarks(
                others, policy, limit=cfg.bench_limit, k=cfg.k, seed=cfg.seeds[0], tts=cfg.tts, user_sim=user_sim,
                judge=judge,
                paths=cfg.paths.as_dict(), options={b: cfg.bench.for_benchmark(b) for b in others},
                slots=results["models"], show_progress=cfg.progress)
            from envace.evaluation.verdict import run_failures

            results["failures"] = run_failures(results["benchmarks"]["results"], cfg.max_judge_failure_share)
            if store is not None:  # every per-task trajectory, in its benchmark's store run (idempotent)
                store.put_benchmarks(results["benchmarks"]["results"])
        if store is not None:
            store.commit()  # committed; the runs end finished once MLflow has the evaluation
            results["store_run_id"] = store.run_id  # the tool world's run (None without "world")
            results["store"] = store.summary()  # every run by benchmark, rows new / already stored, the checkpoint
        results["wall_s"] = time.perf_counter() - t0
        from envace.benchmarks.base import jsonable  # BenchmarkResults as plain JSON records, never their repr

        (out / "eval.json").write_text(json.dumps(jsonable(results), indent=2))
        results["written_to"] = str(out / "eval.json")
        if record is not None:
            results["mlflow_run_id"] = _log_to_mlflow(record, cfg, results, out)
    except BaseException as exc:
        if record is not None:  # failed, or killed on Ctrl-C / SIGTERM (envace.tracking.lifecycle)
            with contextlib.suppress(Exception):  # the evaluation's own error is the one to report
                record.close(outcome_of(exc), exc)
        raise
    if record is not None:
        record.close()  # the store runs and the MLflow run end finished together
    return results


def eval_metrics(results: dict[str, Any]) -> dict[str, float]:
    """Flat MLflow metrics of an evaluation: world success / reward per domain and rehearsal fidelity
    per tool (`fidelity/<tool>/<score>`)."""
    from envace.fidelity import ToolErrorPrediction, ToolFidelity, error_metric_dict, fidelity_metric_dict

    m: dict[str, float] = {}
    world = results.get("world")
    if world:
        for k in ("success", "reward", "tool_call_validity"):
            m[f"world/{k}"] = float(world[k])
        for dom, vals in world["per_domain"].items():
            for k, v in vals.items():
                m[f"world/{dom}/{k}"] = float(v)
        fid = world.get("fidelity") or {}
        per_tool = fid.get("per_tool") or {}
        m.update(fidelity_metric_dict({t: ToolFidelity(**v) for t, v in per_tool.items()}))
        errors = fid.get("error_prediction") or {}  # "did the real environment return an error", per tool
        m.update(error_metric_dict({t: ToolErrorPrediction(t, v["n"], v["tp"], v["fp"], v["fn"])
                                    for t, v in errors.items()}))
        if fid.get("determined_pairs"):
            for k in ("json_valid", "schema_ok", "exact_match", "field_f1"):
                m[f"fidelity/determined/{k}"] = float(fid[f"determined_{k}"])
            m["fidelity/determined/n"] = float(fid["determined_pairs"])
    return m


def _log_to_mlflow(record: RunRecord, cfg: EvalConfig, results: dict[str, Any], out: Path) -> str:
    tags = {}
    if results.get("store_run_id"):
        tags["envace.store_run_id"] = results["store_run_id"]
    store = results.get("store") or {}
    if store.get("run_ids"):
        tags["envace.store_run_ids"] = json.dumps(store["run_ids"], sort_keys=True)
    if store.get("checkpoint"):  # the checkpoint this evaluation scored, and the training run that wrote it
        tags.update(CheckpointRef(**store["checkpoint"]).tags())
    run = record.start_mlflow(cfg.tracking.experiment, f"eval-{cfg.model_name()}", cfg, kind="eval",
                              parent_run_id=cfg.tracking.parent_run_id, tags=tags)
    run.log_step_metrics(0, eval_metrics(results))
    run.log_artifact(out / "eval.json", "eval")
    report = (results.get("benchmarks") or {}).get("report") or {}
    if report.get("report_dict"):  # the dashboard's Benchmarks page: our scores beside the paper's rows
        run.log_artifact_dict(report["report_dict"], "benchmarks/report.json")
    return run.run_id
