"""An evaluation's runs in the trajectory store: the tool world's trajectories and every benchmark's
per-task trajectories, each in the store run of its (checkpoint, benchmark, protocol) (`envace.store.eval_runs`),
so a re-run of the same checkpoint × benchmark × seed finds its run again and adds no row.

- Tool world (`put`, while `evaluate_world` runs): a `TrajectoryWriter` on the world's run; step = the
  evaluation seed, split = the task split (`<split>-fidelity` for the rehearse-mode fidelity pass); with
  test-time rehearsal the scored episodes are `tts-commit` and their rehearsals `tts-private`.
- Benchmarks (`put_benchmarks`, once their results are in): one run per benchmark, one trajectory per
  (set, task, attempt) with mode `eval` (envace.store.benchmark_rows), step = the benchmark's seed.

`world_eval_store` is the same for a tool-world evaluation run outside `envace eval` (the demo's).

Every run is RUNNING while the evaluation runs and ends FINISHED once MLflow has the evaluation (linked by
`mlflow_run_id`), FAILED or KILLED when the evaluation raised or was interrupted: the runs belong to the
evaluation's `envace.tracking.run_record.RunRecord`, which ends them and its MLflow run together (SIGTERM
raises while it is open: envace.tracking.lifecycle).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from envace.provenance.checkpoint_ref import CheckpointRef, checkpoint_ref


def _model_ref(model_dir: Path) -> CheckpointRef:
    return checkpoint_ref(model_dir) if Path(model_dir).is_dir() else CheckpointRef.for_name(str(model_dir))


def world_protocol(cfg: Any) -> dict[str, Any]:
    """What besides the checkpoint changes the tool world's trajectories (see envace.store.eval_runs)."""
    return {"data": cfg.data.model_dump(mode="json"), "split": cfg.split, "n_tasks": cfg.n_tasks,
            "rollout": cfg.rollout.model_dump(mode="json"), "fidelity": cfg.fidelity,
            "tts": cfg.tts.record() if cfg.tts.on else None}


def put_world(writer: Any, kind: str, seed: int, trajs: list, *, split: str, tts: bool = False) -> None:
    """`evaluate_world`'s `on_trajectories(kind, seed, trajs)` into a `TrajectoryWriter`: step = the seed,
    split = the task split (`<split>-<kind>` for a pass other than the scored "env" one)."""
    split = split if kind == "env" else f"{split}-{kind}"
    if kind == "env" and tts:  # committed runs (tts-commit) + private rehearsals (tts-private)
        from envace.store.tts import put_tts

        put_tts(writer, trajs, step=seed, split=split)
        return
    writer.put(trajs, step=seed, mode="eval", split=split)


@contextmanager
def world_eval_store(url: str | Path, model_dir: str | Path, protocol: Mapping[str, Any], *, split: str = "test",
                     name: str | None = None, mlflow_run_id: str | None = None
                     ) -> Iterator[Callable[[str, int, list], None]]:
    """A tool-world evaluation outside `envace eval` (the demo's paired evaluations) into the store: the
    run of (checkpoint, "world", protocol), RUNNING while the block runs, then FINISHED (FAILED / KILLED
    when it raised). Yields the `on_trajectories(kind, seed, trajs)` callback to pass to `evaluate_world`
    (or `envace.evaluation.paired.score_tasks`). `protocol` holds what changes the episodes (sampling
    temperature, rollout limits, task source), so a re-run with the same ones adds no row."""
    from envace.provenance.gitinfo import git_commit
    from envace.store.eval_runs import eval_run_id
    from envace.store.runs import RunInfo
    from envace.tracking.run_record import RunRecord

    ref = _model_ref(Path(model_dir))
    run_id = eval_run_id(ref.content_hash, "world", protocol)
    config = {"benchmark": "world", "checkpoint": dataclasses.asdict(ref), "protocol": dict(protocol)}
    with RunRecord(store_url=url) as record:
        writer = record.start_store_run(RunInfo(id=run_id, name=name or f"eval-{Path(model_dir).name}-world",
                                                kind="eval", status="running", config=config,
                                                git_commit=git_commit(), mlflow_run_id=mlflow_run_id))
        yield lambda kind, seed, trajs: put_world(writer, kind, seed, trajs, split=split)


@contextmanager
def store_paired_eval(url: str | Path | None, model_dir: str | Path, cfg: Any, *, temperature: float,
                      name: str) -> Iterator[Callable[[str, int, list], None] | None]:
    """`world_eval_store` for one `score_tasks` pass of `cfg` (an EvalConfig: task source, split, task
    count, rollout) at `temperature`; yields None (store nothing) when `url` is None."""
    if url is None:
        yield None
        return
    protocol = {**world_protocol(cfg), "temperature": temperature}
    with world_eval_store(url, model_dir, protocol, split=cfg.split, name=name) as put:
        yield put


class EvalStore:
    """The evaluation's store runs (kind `eval`) in the store of its run record (`tracking.store_url`,
    default `<out>/store.db`: envace.tracking.locations); they end with that record."""

    def __init__(self, cfg: Any, model_dir: Path, record: Any) -> None:
        from envace.provenance.gitinfo import git_commit

        self.cfg = cfg
        self.record = record  # envace.tracking.run_record.RunRecord
        self.url = record.store_url
        self.ref = _model_ref(model_dir)
        self.name = Path(self.ref.step_dir or self.ref.model_dir).name if self.ref.step is not None \
            else Path(str(model_dir)).name
        self.git_commit = git_commit()
        self.run_ids: dict[str, str] = {}  # benchmark ("world" for the tool world) -> store run id
        self.counts: dict[str, dict[str, int]] = {}  # benchmark -> {"new": n, "already_stored": n}
        self.run_id: str | None = None  # the tool world's run
        self.writer = None
        self.engine = record.open_store()
        if "world" in cfg.benchmarks:
            self._open_world()

    def _run_info(self, run_id: str, benchmark: str, protocol: Mapping[str, Any]) -> Any:
        from envace.store.runs import RunInfo

        config = {"benchmark": benchmark, "checkpoint": dataclasses.asdict(self.ref), "protocol": dict(protocol),
                  "eval": self.cfg.model_dump(mode="json")}
        return RunInfo(id=run_id, name=f"eval-{self.name}-{benchmark}", kind="eval", status="running",
                       config=config, git_commit=self.git_commit)

    def _open_world(self) -> None:
        from envace.store.eval_runs import eval_run_id

        protocol = world_protocol(self.cfg)
        self.run_id = eval_run_id(self.ref.content_hash, "world", protocol)
        self.run_ids["world"] = self.run_id
        self.writer = self.record.start_store_run(self._run_info(self.run_id, "world", protocol))

    def put(self, kind: str, seed: int, trajs: list) -> None:
        """Tool-world trajectories of one seed (`kind` "env" = the scored episodes, else e.g. "fidelity")."""
        put_world(self.writer, kind, seed, trajs, split=self.cfg.split, tts=self.cfg.tts.on)

    def put_benchmarks(self, results: Mapping[str, Any]) -> None:
        """Every per-task trajectory of each `BenchmarkResult` ({name: result}) into its benchmark's run."""
        from envace.store.benchmark_rows import put_benchmark_records
        from envace.store.eval_runs import benchmark_protocol, eval_run_id

        for name, result in results.items():
            protocol = benchmark_protocol(result)
            run_id = eval_run_id(self.ref.content_hash, name, protocol)
            self.record.start_store_run(self._run_info(run_id, name, protocol), writer=False)
            self.run_ids[name] = run_id
            new, old = put_benchmark_records(self.engine, run_id, name, result.records, int(result.seed))
            self.counts[name] = {"new": new, "already_stored": old}

    def commit(self) -> None:
        """Commit the tool world's trajectories (raises the writer's error); the runs stay RUNNING until
        the record ends them, FINISHED once MLflow has the evaluation."""
        if self.writer is not None:
            self.writer.close()

    def summary(self) -> dict[str, Any]:
        """For eval.json and MLflow: the runs, what was new, and the checkpoint they belong to."""
        return {"run_ids": dict(self.run_ids), "counts": dict(self.counts), "checkpoint": dataclasses.asdict(self.ref)}
