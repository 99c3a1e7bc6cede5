"""The trainer's view of tracking: one MLflow run per training job (resumed with the job) and the
trajectory store, behind three calls — `log_step`, `flush` (at each checkpoint) and `close`.

On resume, the MLflow run and the store run recorded in the checkpoint's meta are continued. Steps
after the last checkpoint are re-run with the same seeds; their trajectories are written again (the
store skips natural keys it already holds) and their metrics are not logged twice (steps at or below
the last logged step are skipped).

Cost per step (bench/tracking_overhead.py): the store writer converts on this thread and commits on its
own; MLflow's SQL store costs ~15 ms of CPU and a synced commit per `log_batch` whatever its size, so
step metrics are buffered and sent at most every `METRICS_INTERVAL_S` seconds, at every `flush` (so all
steps up to a checkpoint are in MLflow before the checkpoint is written) and at `close`.

Where the runs go: `envace.tracking.locations` (a train job: MLflow in `<out_dir>/../mlflow`, the store in
`<out_dir>/store.db`, unless `tracking.*` names them). How the run ends: `close()` ends the MLflow run and
the store run alike through one `envace.tracking.run_record.RunRecord`, FINISHED on a normal exit, FAILED
when an exception is propagating through the caller's `finally` (or the tracker's own writes fail), KILLED
on Ctrl-C or SIGTERM (`envace.tracking.lifecycle`; the SIGTERM handler is installed while the run is open).
A failure while the tracker starts (e.g. the store's database refuses the connection) ends the MLflow run
FAILED before the error propagates. The run ids are also kept in `<out_dir>/tracking_runs.json` from the
start, so a run SIGKILLed before its first checkpoint is marked KILLED by the next start in that directory
instead of staying RUNNING forever.
"""

from __future__ import annotations

import json
import sys
import time
import uuid
import warnings
from pathlib import Path
from typing import Any

from envace.tracking.lifecycle import RunOutcome, outcome_of
from envace.tracking.locations import Kind, locations
from envace.tracking.run_record import RunRecord
from envace.trainers.config import TrainConfig
from envace.types import Trajectory

SAMPLE_TRAJECTORIES = 4  # trajectories per step written as an MLflow artifact at checkpoints
METRICS_INTERVAL_S = 5.0  # step metrics reach MLflow at most this late (and at every checkpoint)


def trajectory_summary(t: Trajectory) -> dict[str, Any]:
    return {"task": t.task.uuid, "prompt_index": t.prompt_index, "sample_index": t.sample_index,
            "reward": t.reward, "termination": t.termination.value if t.termination else None,
            "turns": [{"role": u.role.value, "text": u.text, "advantage": u.advantage} for u in t.turns]}


class RunTracker:
    def __init__(self, cfg: TrainConfig, resume_meta: dict[str, Any] | None = None, *, kind: str = "train"):
        self.cfg = cfg
        self.enabled = cfg.tracking.enabled
        meta = resume_meta or {}
        self.run_id: str = meta.get("store_run_id") or uuid.uuid4().hex[:16]
        self.mlflow_run_id: str | None = None
        self.writer = None
        self.record: RunRecord | None = None
        self._last_logged = -1
        self._samples: list[dict[str, Any]] = []
        self._metrics: list[tuple[int, dict[str, Any], int]] = []  # (step, metrics, ms) not sent yet
        self._sent_at = time.monotonic()
        self._closed = False
        self.mlflow = None
        if not self.enabled:
            return
        t = cfg.tracking
        self.loc = locations(cfg.out_dir, Kind.TRAIN, mlflow_uri=t.mlflow_uri, store_url=t.store_url)
        self.record = RunRecord(self.loc)
        try:
            self._open(cfg, meta, kind)
        except BaseException:  # the runs that started end FAILED / KILLED, not RUNNING forever
            exc = sys.exc_info()[1]
            outcome = outcome_of(exc)
            self._closed = True
            try:
                self.record.close(RunOutcome.FAILED if outcome is RunOutcome.FINISHED else outcome, exc)
            except Exception:  # noqa: BLE001 - the original error is the one to report
                pass
            raise

    def _open(self, cfg: TrainConfig, meta: dict[str, Any], kind: str) -> None:
        from envace.provenance.gitinfo import git_commit
        from envace.store.runs import RunInfo

        inputs = [cfg.data.path] if cfg.data.path else []
        self.mlflow = self.record.start_mlflow(
            cfg.tracking.experiment, Path(cfg.out_dir).name, cfg, kind=kind,
            parent_run_id=cfg.tracking.parent_run_id, resume_run_id=meta.get("mlflow_run_id"),
            tags={"envace.mode": cfg.rollout.mode, "envace.policy": cfg.policy, "envace.store_run_id": self.run_id}
            | ({"envace.copied_from": meta["copied_from"]} if meta.get("copied_from") else {}),
            input_paths=inputs)
        self.mlflow_run_id = self.mlflow.run_id
        if meta.get("mlflow_run_id"):
            hist = self.mlflow.metric_history("reward/mean")
            self._last_logged = max((s for s, _ in hist), default=-1)
        self.writer = self.record.start_store_run(RunInfo(
            id=self.run_id, name=Path(cfg.out_dir).name, kind=kind, config=cfg.model_dump(mode="json"),
            git_commit=git_commit(), mlflow_run_id=self.mlflow_run_id, parent_id=None))
        self._close_predecessor()

    def _close_predecessor(self) -> None:
        """Mark KILLED the runs of the last start in this directory if they are still RUNNING (a SIGKILL
        before the first checkpoint: nothing resumed them), then record this run's ids there."""
        from envace.store.runs import get_run_status, set_run_status

        path = self.loc.run_ids_file
        try:
            old = json.loads(path.read_text()) if path.is_file() else {}
        except (json.JSONDecodeError, UnicodeDecodeError):
            old = {}
        here = str(self.loc.out_dir)
        if old.get("out_dir") not in (None, here):  # copied from another folder: those runs are not ours to end
            old = {}
        old_ml, old_store = old.get("mlflow_run_id"), old.get("store_run_id")
        if old_ml and old_ml != self.mlflow_run_id:
            try:
                if self.mlflow.client.get_run(old_ml).info.status == "RUNNING":
                    self.mlflow.client.set_terminated(old_ml, RunOutcome.KILLED.value)
                    self.mlflow.client.set_tag(old_ml, "envace.ended_by", f"restart as {self.mlflow_run_id}")
            except Exception as exc:  # noqa: BLE001 - another tracking URI than last time: nothing to close here
                from envace.secrets import mask_text

                warnings.warn(f"could not close the previous MLflow run {old_ml} of {self.cfg.out_dir}: "
                              f"{mask_text(str(exc))}", stacklevel=3)
        engine = self.record.engine
        if old_store and old_store != self.run_id and get_run_status(engine, old_store) == "running":
            set_run_status(engine, old_store, RunOutcome.KILLED.store_status)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"mlflow_run_id": self.mlflow_run_id, "store_run_id": self.run_id,
                                    "out_dir": here}, indent=2))

    def log_engines(self, engines: dict[str, str]) -> None:
        """Which generation engine ran each model: run params `engine.<model>` (a resumed run keeps the
        values of its first start: params are immutable) and the tag `envace.engine` (this start's)."""
        if self.mlflow is None:
            return
        old = self.mlflow.client.get_run(self.mlflow.run_id).data.params
        self.mlflow.log_params({f"engine.{k}": v for k, v in engines.items() if f"engine.{k}" not in old})
        self.mlflow.set_tags({"envace.engine": ",".join(f"{k}={v}" for k, v in sorted(engines.items()))})

    def log_step(self, step: int, metrics: dict[str, float], trajs: list[Trajectory]) -> None:
        if not self.enabled:
            return
        self.writer.put(trajs, step, mode="train", split=self.cfg.data.split)
        if step > self._last_logged:
            self._metrics.append((step, dict(metrics), int(time.time() * 1000)))
            self._last_logged = step
            if time.monotonic() - self._sent_at >= METRICS_INTERVAL_S:
                self._send_metrics()
        self._samples = [trajectory_summary(t) for t in trajs[:SAMPLE_TRAJECTORIES]]
        self._sample_step = step

    def _send_metrics(self) -> None:
        self._sent_at = time.monotonic()
        if self._metrics:
            pending, self._metrics = self._metrics, []
            self.mlflow.log_steps_metrics(pending)

    def flush(self) -> None:
        if not self.enabled:
            return
        self._send_metrics()
        self.writer.flush()
        if self._samples:
            self.mlflow.log_artifact_dict(self._samples, f"samples/step_{self._sample_step:06d}.json")

    def log_checkpoint(self, path: Path, *, final: bool = False) -> None:
        """Record a saved checkpoint in the MLflow run (uploaded up to tracking.checkpoint_artifact_max_mb,
        else linked by path: `envace.tracking.mlflow_checkpoints`), with its content hash (the one an evaluation of it
        records); the `final` one is also registered as a model version (tracking.registered_model)."""
        if not self.enabled:
            return
        from envace.provenance.checkpoint_ref import checkpoint_ref
        from envace.tracking.mlflow_checkpoints import log_checkpoint

        ref = checkpoint_ref(path)
        t = self.cfg.tracking
        name = self._model_name() if final else None
        log_checkpoint(self.mlflow, path, register_as=name, max_artifact_mb=t.checkpoint_artifact_max_mb,
                       content_hash=ref.content_hash, step=ref.step)

    def _model_name(self) -> str:
        from envace.tracking.mlflow_checkpoints import registered_model_name

        return self.cfg.tracking.registered_model or registered_model_name(f"envace-{Path(self.cfg.out_dir).name}")

    def ensure_checkpoint_logged(self, path: Path, *, final: bool = False) -> None:
        """Log the checkpoint a run resumes from unless MLflow already holds it completely (its upload
        tag and, for the final one, its model version): a kill mid-upload leaves neither."""
        if not self.enabled:
            return
        from envace.provenance.checkpoint_ref import checkpoint_ref
        from envace.tracking.mlflow_checkpoints import checkpoint_recorded

        step = checkpoint_ref(path).step
        if not checkpoint_recorded(self.mlflow, Path(path).name, register_as=self._model_name() if final else None,
                                   step=step):
            self.log_checkpoint(path, final=final)

    def close(self, outcome: RunOutcome | None = None) -> None:
        """Send what is buffered, then end the run record (store writer committed, store run and MLflow
        run ended alike: `envace.tracking.run_record`). Without `outcome`, it is read from the exception
        propagating through the caller (`close()` in a `finally` block): FINISHED when none, KILLED for
        Ctrl-C / SIGTERM, FAILED otherwise. Idempotent."""
        if self._closed:
            return
        self._closed = True
        exc = sys.exc_info()[1] if outcome is None else None
        if outcome is None:
            outcome = outcome_of(exc)
        error: BaseException | None = None
        try:
            if self.enabled:
                self._send_metrics()
        except BaseException as err:  # noqa: BLE001 - still close the writer and end the runs
            error = err
        if error is not None and outcome is RunOutcome.FINISHED:
            outcome = RunOutcome.FAILED
        try:
            if self.record is not None:
                self.record.close(outcome, exc)
        except BaseException as err:  # noqa: BLE001
            error = error or err
        if error is not None:
            raise error
