"""One tracked run: its MLflow run and the trajectory-store runs that belong to it, opened under one
SIGTERM handler and ended together with one outcome. Training (`envace.trainers.run_tracker`),
evaluation (`envace.evaluation.run`), worldbench scoring, the sweep's parent run and evaluation cells open
their runs through it, and the demo and the Prefect flows through `tracked_run` (an MLflow run alone); where
the files go is `envace.tracking.locations`.

    record = RunRecord(locations(out_dir, Kind.TRAIN, ...))
    record.start_mlflow(experiment, name, config, kind="train", tags=..., parent_run_id=...)
    writer = record.start_store_run(RunInfo(...), writer=True)   # or record.add_store_run(...) for rows
    ...                                                          # written elsewhere (benchmarks)
    record.close()            # in a `finally`, or leave a `with RunRecord(...) as record:` block

How it ends (`envace.tracking.lifecycle`): FINISHED on a normal exit, KILLED on Ctrl-C or SIGTERM
(raised in the main thread while the record is open), FAILED on any other exception, or when its own
closing writes fail. Every store run gets that status (and the MLflow run's id, when there is one);
the MLflow run ends with it too. MLflow may open at the start (training: the run is live while steps
arrive) or at the end (evaluation: the run is written once the results exist); either way nothing is
left RUNNING.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from envace.tracking.lifecycle import RunOutcome, outcome_of, sigterm_raises
from envace.tracking.locations import RunLocations


class RunRecord:
    """`RunRecord(locations(...))`; `RunRecord(store_url=...)` for store runs alone (no MLflow run);
    `RunRecord(mlflow_uri=...)` for an MLflow run alone (`tracked_run`)."""

    def __init__(self, loc: RunLocations | None = None, *, store_url: str | Path | None = None,
                 mlflow_uri: str | None = None) -> None:
        if loc is None and store_url is None and mlflow_uri is None:
            raise ValueError("RunRecord needs its locations (envace.tracking.locations), a store_url or an mlflow_uri")
        self.mlflow_uri = loc.mlflow_uri if loc is not None else mlflow_uri
        self.store_url = str(store_url) if store_url is not None else (loc.store_url if loc is not None else None)
        self.mlflow: Any = None  # envace.tracking.mlflow_run.MlflowRun, once started
        self.engine: Any = None  # the store's SQLAlchemy engine, once opened
        self.writer: Any = None  # the TrajectoryWriter of the run that streams trajectories, if any
        self.store_runs: dict[str, str] = {}  # store run id -> its kind, every one ended by close()
        self._stack = ExitStack()
        self._stack.enter_context(sigterm_raises())  # a SIGTERM ends the runs KILLED, not RUNNING
        self._closed = False

    # ----- opening ------------------------------------------------------------------------------
    def start_mlflow(self, experiment: str, name: str, config: Any, *, kind: str,
                     parent_run_id: str | None = None, resume_run_id: str | None = None,
                     tags: Mapping[str, Any] | None = None, input_paths: Iterable[str | Path] = ()) -> Any:
        """Open (or resume) the MLflow run at `mlflow_uri`, tagged `envace.kind`; it ends in `close`."""
        from envace.tracking.mlflow_run import start_run

        if not self.mlflow_uri:
            raise ValueError("this run record has no MLflow location; build it from envace.tracking.locations")
        self.mlflow = self._stack.enter_context(start_run(
            self.mlflow_uri, experiment, name, config, parent_run_id=parent_run_id, resume_run_id=resume_run_id,
            tags={"envace.kind": kind, **(tags or {})}, input_paths=input_paths))
        return self.mlflow

    def open_store(self) -> Any:
        """The store's engine at `store_url`, its schema brought up to date (once)."""
        if self.store_url is None:
            raise ValueError("this run record has no store location; build it from envace.tracking.locations")
        if self.engine is None:
            from envace.store.session import make_engine, upgrade

            engine = make_engine(self.store_url)
            try:
                upgrade(engine)
            except BaseException:
                engine.dispose()
                raise
            self.engine = engine
        return self.engine

    def start_store_run(self, info: Any, *, writer: bool = True) -> Any:
        """Register store run `info` (a `envace.store.runs.RunInfo`, status running) to be ended by `close`;
        with `writer`, returns the `TrajectoryWriter` that streams its trajectories (one per record)."""
        from envace.store.runs import register_run

        engine = self.open_store()
        kind = str(getattr(info.kind, "value", info.kind))
        if not writer:
            register_run(engine, info)
            self.store_runs[info.id] = kind
            return None
        if self.writer is not None:
            raise RuntimeError(f"run record already streams store run {self.writer.run_id}; one writer per record")
        from envace.store.writer import TrajectoryWriter

        self.writer = TrajectoryWriter(self.store_url, info.id, run=info, create_schema=False)
        self.store_runs[info.id] = kind
        return self.writer

    # ----- closing ------------------------------------------------------------------------------
    def close(self, outcome: RunOutcome | None = None, exc: BaseException | None = None) -> RunOutcome:
        """Commit what the writer holds, end every store run and the MLflow run with one outcome and
        remove the SIGTERM handler. `exc` is the exception ending the run (read from the one propagating
        through the caller when neither it nor `outcome` is given: `close()` in a `finally`); the MLflow
        run then records it (`envace.error`). Idempotent; returns the outcome (FAILED when closing
        failed, and that error is raised after everything was ended)."""
        if self._closed:
            return RunOutcome.FINISHED if outcome is None else outcome
        self._closed = True
        if outcome is None and exc is None:
            exc = sys.exc_info()[1]
        if outcome is None:
            outcome = outcome_of(exc)
        if outcome is RunOutcome.FINISHED and self.mlflow is not None and self.mlflow.outcome is not None:
            outcome = self.mlflow.outcome  # `mark_failed` (a sweep whose cells failed): every run ends so
        error: BaseException | None = None
        try:
            if self.writer is not None:
                self.writer.close()
        except BaseException as err:  # noqa: BLE001 - still end the runs
            error = err
        if error is not None and outcome is RunOutcome.FINISHED:
            outcome = RunOutcome.FAILED
        try:
            if self.engine is not None:
                from envace.store.runs import RunInfo, register_run

                ml_id = self.mlflow.run_id if self.mlflow is not None else None
                for run_id, kind in self.store_runs.items():
                    register_run(self.engine, RunInfo(id=run_id, kind=kind, status=outcome.store_status,
                                                      mlflow_run_id=ml_id))
        except BaseException as err:  # noqa: BLE001
            error = error or err
        finally:
            if error is not None and outcome is RunOutcome.FINISHED:
                outcome = RunOutcome.FAILED
            try:
                if self.engine is not None:
                    self.engine.dispose()
            finally:
                if self.mlflow is not None:
                    self.mlflow.outcome = outcome
                if exc is None:  # ends the MLflow run, then leaves the SIGTERM handler
                    self._stack.close()
                else:  # the MLflow run sees the exception: its status and `envace.error` come from it
                    self._stack.__exit__(type(exc), exc, exc.__traceback__)
        if error is not None:
            raise error
        return outcome

    def __enter__(self) -> RunRecord:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:  # noqa: ANN001 - context manager protocol
        self.close(outcome_of(exc), exc)


@contextmanager
def tracked_run(mlflow_uri: str, experiment: str, name: str, config: Any, *, kind: str,
                parent_run_id: str | None = None, tags: Mapping[str, Any] | None = None,
                input_paths: Iterable[str | Path] = ()) -> Iterator[Any]:
    """A run record that holds one MLflow run and no store run (the demo's and the flows' parent and step
    runs); yields the `envace.tracking.mlflow_run.MlflowRun`, ended with the block's outcome."""
    with RunRecord(mlflow_uri=mlflow_uri) as record:
        yield record.start_mlflow(experiment, name, config, kind=kind, parent_run_id=parent_run_id, tags=tags,
                                  input_paths=input_paths)
