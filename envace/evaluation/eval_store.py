"""An evaluation's runs in the trajectory store: the tool world's trajectories and every benchmark's
per-task trajectories, each in the store run of its (checkpoint, benchmark, protocol) (`envace.store.eval_runs`),
so a re-run of the same checkpoint × benchmark × seed finds its run again and adds no row.

- Tool world (`put`, while `evaluate_world` runs): a `TrajectoryWriter` on the world's run; step = the
  evaluation seed, split = the task split (`<split>-fidelity` for the rehearse-mode fidelity pass); with
  test-time rehearsal the scored episodes are `tts-commit` and their rehearsals `tts-private`.
- Benchmarks (`put_benchmarks`, once their results are in): one run per benchmark, one trajectory per
  (set, task, attempt) with mode `eval` (envace.store.benchmark_rows), step = the benchmark's seed.

Every run is RUNNING while the evaluation runs and ends FINISHED once MLflow has the evaluation (linked by
`mlflow_run_id`), FAILED or KILLED when the evaluation raised or was interrupted (SIGTERM raises while the
store is open: envace.tracking.lifecycle).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from envace.tracking.checkpoint_ref import CheckpointRef, checkpoint_ref


def _model_ref(model_dir: Path) -> CheckpointRef:
    return checkpoint_ref(model_dir) if Path(model_dir).is_dir() else CheckpointRef.for_name(str(model_dir))


def world_protocol(cfg: Any) -> dict[str, Any]:
    """What besides the checkpoint changes the tool world's trajectories (see envace.store.eval_runs)."""
    return {"data": cfg.data.model_dump(mode="json"), "split": cfg.split, "n_tasks": cfg.n_tasks,
            "rollout": cfg.rollout.model_dump(mode="json"), "fidelity": cfg.fidelity,
            "tts": {"n": cfg.tts_n, "mode": cfg.tts_mode, **cfg.tts.model_dump(mode="json")} if cfg.tts_n else None}


class EvalStore:
    """The evaluation's store runs (kind `eval`) at `tracking.store_url` (default `<out>/store.db`)."""

    def __init__(self, cfg: Any, model_dir: Path, out: Path) -> None:
        from envace.store.session import make_engine, upgrade
        from envace.tracking.gitinfo import git_commit
        from envace.tracking.lifecycle import sigterm_raises

        self.cfg = cfg
        self.url = cfg.tracking.store_url or str(Path(out) / "store.db")
        self.ref = _model_ref(model_dir)
        self.name = Path(self.ref.step_dir or self.ref.model_dir).name if self.ref.step is not None \
            else Path(str(model_dir)).name
        self.git_commit = git_commit()
        self.run_ids: dict[str, str] = {}  # benchmark ("world" for the tool world) -> store run id
        self.counts: dict[str, dict[str, int]] = {}  # benchmark -> {"new": n, "already_stored": n}
        self.run_id: str | None = None  # the tool world's run
        self.writer = None
        self._signals = ExitStack()  # while the runs are open, SIGTERM raises: they end killed, not running
        self._signals.enter_context(sigterm_raises())
        self.engine = make_engine(self.url)
        try:
            upgrade(self.engine)
            if "world" in cfg.benchmarks:
                self._open_world()
        except BaseException:
            self.engine.dispose()
            self._signals.close()
            raise

    def _run_info(self, run_id: str, benchmark: str, protocol: Mapping[str, Any]) -> Any:
        from envace.store.runs import RunInfo

        config = {"benchmark": benchmark, "checkpoint": dataclasses.asdict(self.ref), "protocol": dict(protocol),
                  "eval": self.cfg.model_dump(mode="json")}
        return RunInfo(id=run_id, name=f"eval-{self.name}-{benchmark}", kind="eval", status="running",
                       config=config, git_commit=self.git_commit)

    def _open_world(self) -> None:
        from envace.store.eval_runs import eval_run_id
        from envace.store.writer import TrajectoryWriter

        protocol = world_protocol(self.cfg)
        self.run_id = eval_run_id(self.ref.content_hash, "world", protocol)
        self.run_ids["world"] = self.run_id
        self.writer = TrajectoryWriter(self.url, self.run_id, run=self._run_info(self.run_id, "world", protocol),
                                       create_schema=False)

    def put(self, kind: str, seed: int, trajs: list) -> None:
        """Tool-world trajectories of one seed (`kind` "env" = the scored episodes, else e.g. "fidelity")."""
        split = self.cfg.split if kind == "env" else f"{self.cfg.split}-{kind}"
        if kind == "env" and self.cfg.tts_n > 0:  # committed runs (tts-commit) + private rehearsals (tts-private)
            from envace.store.tts import put_tts

            put_tts(self.writer, trajs, step=seed, split=split)
            return
        self.writer.put(trajs, step=seed, mode="eval", split=split)

    def put_benchmarks(self, results: Mapping[str, Any]) -> None:
        """Every per-task trajectory of each `BenchmarkResult` ({name: result}) into its benchmark's run."""
        from envace.store.benchmark_rows import put_benchmark_records
        from envace.store.eval_runs import benchmark_protocol, eval_run_id
        from envace.store.runs import register_run

        for name, result in results.items():
            protocol = benchmark_protocol(result)
            run_id = eval_run_id(self.ref.content_hash, name, protocol)
            register_run(self.engine, self._run_info(run_id, name, protocol))
            self.run_ids[name] = run_id
            new, old = put_benchmark_records(self.engine, run_id, name, result.records, int(result.seed))
            self.counts[name] = {"new": new, "already_stored": old}

    def close(self, status: str | None) -> None:
        """Commit what is pending; with `status` (failed / killed), end every run so."""
        try:
            if self.writer is not None:
                self.writer.close()
        finally:
            try:
                if status is not None:
                    self._register(status, None)
                    self.engine.dispose()  # no finish() follows a failed evaluation
            finally:
                self._signals.close()

    def finish(self, mlflow_run_id: str | None) -> None:
        try:
            self._register("finished", mlflow_run_id)
        finally:
            self.engine.dispose()

    def _register(self, status: str, mlflow_run_id: str | None) -> None:
        from envace.store.runs import RunInfo, register_run

        for run_id in self.run_ids.values():
            register_run(self.engine, RunInfo(id=run_id, kind="eval", status=status, mlflow_run_id=mlflow_run_id))

    def summary(self) -> dict[str, Any]:
        """For eval.json and MLflow: the runs, what was new, and the checkpoint they belong to."""
        return {"run_ids": dict(self.run_ids), "counts": dict(self.counts), "checkpoint": dataclasses.asdict(self.ref)}
