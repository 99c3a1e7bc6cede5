"""`envace eval`: one checkpoint on the tool world and/or the benchmarks, optionally with test-time
rehearsal; results written as JSON beside the model (or to `out_dir`) and, when tracking is on, to one
MLflow run (metrics + the JSON as an artifact) and to the trajectory store.

Store: one run of kind `eval` (at `tracking.store_url`, default `<out>/store.db`, as for training) holds
the tool-world trajectories with mode `eval`: step = the evaluation seed, split = the task split for the
scored episodes and `<split>-fidelity` for the rehearse-mode fidelity pass, keys (prompt, sample) from
the rollout. Written by the same `TrajectoryWriter` as training, so a re-put key is a no-op.
With test-time rehearsal (`tts_n > 0`) the scored episodes are stored with mode `tts-commit` and their
private rehearsals with mode `tts-private`, linked (envace.store.tts).
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

import torch

from envace.evaluation.config import EvalConfig
from envace.evaluation.world import evaluate_world


def resolve_model_dir(path: str | Path) -> Path:
    """A model dir, or a `step_*` checkpoint dir (its `policy/` or `act/` model)."""
    p = Path(path)
    for sub in ("policy", "act"):
        if (p / sub / "config.json").is_file():
            return p / sub
    return p


def run_eval(cfg: EvalConfig) -> dict[str, Any]:
    from envace.engines.factory import make_engine
    from envace.models.loading import load_policy, pick_device
    from envace.data.tasks import load_tasks

    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    t0 = time.perf_counter()
    model_dir = resolve_model_dir(cfg.model)
    device = torch.device(cfg.device) if cfg.device else pick_device()
    # the data is read before the model is loaded, so a bad data file fails at once
    tasks = load_tasks(cfg.data, split=cfg.split, n=cfg.n_tasks) if "world" in cfg.benchmarks else []
    model, tok = load_policy(model_dir, device=device)
    results: dict[str, Any] = {"model": str(model_dir)}
    engine = make_engine(model, tok, device=device)
    out = Path(cfg.out_dir) if cfg.out_dir else model_dir.parent / f"eval_{model_dir.name}"
    out.mkdir(parents=True, exist_ok=True)
    store = _EvalStore(cfg, model_dir, out) if cfg.tracking.enabled and "world" in cfg.benchmarks else None
    try:
        if "world" in cfg.benchmarks:
            results["world"] = evaluate_world(engine, tasks, cfg.rollout, k=cfg.k, seeds=cfg.seeds,
                                              with_fidelity=cfg.fidelity, tts_n=cfg.tts_n, tts_mode=cfg.tts_mode,
                                              tts_options=cfg.tts,
                                              on_trajectories=store.put if store else None)
        others = [b for b in cfg.benchmarks if b != "world"]
        if others:
            from envace.benchmarks.run import run_benchmarks
            from envace.engines.chat_model import HFChatPolicy, LocalChatModel

            policy = HFChatPolicy(LocalChatModel(engine, name=model_dir.name))
            # the user simulator is its own engine: a separate policy object (its own model when
            # user_sim_model is set), never the TTS-wrapped one, so no rehearsal memory can reach it
            user_sim = (HFChatPolicy(LocalChatModel.from_dir(cfg.user_sim_model, device=str(device)))
                        if cfg.user_sim_model else HFChatPolicy(LocalChatModel(engine, name=model_dir.name)))
            results["benchmarks"] = run_benchmarks(others, policy, limit=cfg.bench_limit, k=cfg.k,
                                                   seed=cfg.seeds[0], tts_n=cfg.tts_n, tts_mode=cfg.tts_mode,
                                                   tts_options=cfg.tts, user_sim=user_sim)
    except BaseException as exc:
        if store is not None:  # failed, or killed on Ctrl-C / SIGTERM (envace.tracking.lifecycle)
            from envace.tracking.lifecycle import outcome_of

            store.close(outcome_of(exc).store_status)
        raise
    if store is not None:
        store.close(None)  # committed; finished once MLflow has the run
        results["store_run_id"] = store.run_id
    results["wall_s"] = time.perf_counter() - t0
    from envace.benchmarks.base import jsonable  # BenchmarkResults as plain JSON records, never their repr

    (out / "eval.json").write_text(json.dumps(jsonable(results), indent=2))
    results["written_to"] = str(out / "eval.json")
    if cfg.tracking.enabled:
        results["mlflow_run_id"] = _log_to_mlflow(cfg, results, out)
        if store is not None:
            store.finish(results["mlflow_run_id"])
    return results


class _EvalStore:
    """The eval run in the trajectory store: its writer while the evaluation runs, then its status."""

    def __init__(self, cfg: EvalConfig, model_dir: Path, out: Path) -> None:
        from envace.store.runs import RunInfo
        from envace.store.writer import TrajectoryWriter
        from envace.tracking.gitinfo import git_commit

        self.cfg = cfg
        self.url = cfg.tracking.store_url or str(out / "store.db")
        self.run_id = uuid.uuid4().hex[:16]
        self.writer = TrajectoryWriter(self.url, self.run_id, run=RunInfo(
            id=self.run_id, name=f"eval-{model_dir.name}", kind="eval", config=cfg.model_dump(mode="json"),
            git_commit=git_commit()))
        from contextlib import ExitStack

        from envace.tracking.lifecycle import sigterm_raises

        self._signals = ExitStack()  # while the run is open, SIGTERM raises: the run ends killed, not running
        self._signals.enter_context(sigterm_raises())

    def put(self, kind: str, seed: int, trajs: list) -> None:
        split = self.cfg.split if kind == "env" else f"{self.cfg.split}-{kind}"
        if kind == "env" and self.cfg.tts_n > 0:  # committed runs (tts-commit) + private rehearsals (tts-private)
            from envace.store.tts import put_tts

            put_tts(self.writer, trajs, step=seed, split=split)
            return
        self.writer.put(trajs, step=seed, mode="eval", split=split)

    def close(self, status: str | None) -> None:
        try:
            self.writer.close()
        finally:
            try:
                if status is not None:
                    self._register(status, None)
            finally:
                self._signals.close()

    def finish(self, mlflow_run_id: str | None) -> None:
        self._register("finished", mlflow_run_id)

    def _register(self, status: str, mlflow_run_id: str | None) -> None:
        from envace.store.runs import RunInfo, register_run
        from envace.store.session import make_engine

        engine = make_engine(self.url)
        try:
            register_run(engine, RunInfo(id=self.run_id, kind="eval", status=status, mlflow_run_id=mlflow_run_id))
        finally:
            engine.dispose()


def eval_metrics(results: dict[str, Any]) -> dict[str, float]:
    """Flat MLflow metrics of an evaluation: world success / reward per domain and rehearsal fidelity
    per tool (`fidelity/<tool>/<score>`)."""
    from envace.fidelity import ToolFidelity, fidelity_metric_dict

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
        if fid.get("determined_pairs"):
            for k in ("json_valid", "schema_ok", "exact_match", "field_f1"):
                m[f"fidelity/determined/{k}"] = float(fid[f"determined_{k}"])
            m["fidelity/determined/n"] = float(fid["determined_pairs"])
    return m


def _log_to_mlflow(cfg: EvalConfig, results: dict[str, Any], out: Path) -> str:
    from envace.tracking.mlflow_run import start_run
    from envace.trainers.tracking import default_mlflow_uri

    uri = cfg.tracking.mlflow_uri or default_mlflow_uri(out)
    tags = {"envace.kind": "eval"}
    if results.get("store_run_id"):
        tags["envace.store_run_id"] = results["store_run_id"]
    with start_run(uri, cfg.tracking.experiment, f"eval-{Path(cfg.model).name}", cfg,
                   parent_run_id=cfg.tracking.parent_run_id, tags=tags) as run:
        run.log_step_metrics(0, eval_metrics(results))
        run.log_artifact(out / "eval.json", "eval")
        return run.run_id
