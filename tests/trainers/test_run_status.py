"""How runs end: FINISHED / FAILED / KILLED in both MLflow and the trajectory store, on
success, on an exception, on Ctrl-C, on SIGTERM during training, after a SIGKILL before the first checkpoint
(closed by the next start in the directory), and when the store's database refuses the connection."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
import sqlalchemy as sa
from mlflow.tracking import MlflowClient

from envace.store.synthetic import synthetic_trajectory
from envace.trainers.config import TrainConfig
from envace.trainers.run_tracker import RunTracker


def _cfg(tmp_path, **tracking) -> TrainConfig:
    return TrainConfig.model_validate({
        "model": str(tmp_path / "unused-model"), "out_dir": str(tmp_path / "run"),
        "tracking": {"mlflow_uri": f"sqlite:///{tmp_path / 'mlflow.db'}", "store_url": str(tmp_path / "store.db"),
                     **tracking}})


def _mlflow_status(tmp_path, run_id: str) -> str:
    return MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}").get_run(run_id).info.status


def _store_statuses(db) -> dict[str, str]:
    engine = sa.create_engine(f"sqlite:///{db}")
    try:
        with engine.connect() as c:
            return {r[0]: r[1] for r in c.execute(sa.text("SELECT id, status FROM runs"))}
    finally:
        engine.dispose()


def _one_step(tracker: RunTracker) -> None:
    tracker.log_step(1, {"reward/mean": 0.5}, [synthetic_trajectory(0, 1, 0, 0, n_gen=2)])


def test_a_finished_run_is_finished_in_mlflow_and_in_the_store(tmp_path):
    tracker = RunTracker(_cfg(tmp_path))
    try:
        _one_step(tracker)
    finally:
        tracker.close()
    assert _mlflow_status(tmp_path, tracker.mlflow_run_id) == "FINISHED"
    assert _store_statuses(tmp_path / "store.db") == {tracker.run_id: "finished"}


@pytest.mark.parametrize(("exc", "mlflow_status"), [(RuntimeError("boom"), "FAILED"), (KeyboardInterrupt(), "KILLED")])
def test_an_exception_through_the_trainers_finally_ends_both_runs(tmp_path, exc, mlflow_status):
    tracker = RunTracker(_cfg(tmp_path))
    with pytest.raises(type(exc)):
        try:
            _one_step(tracker)
            raise exc
        finally:
            tracker.close()  # the embedded trainer's pattern: close() in a finally block
    assert _mlflow_status(tmp_path, tracker.mlflow_run_id) == mlflow_status
    assert _store_statuses(tmp_path / "store.db") == {tracker.run_id: mlflow_status.lower()}
    # the step before the failure is stored
    engine = sa.create_engine(f"sqlite:///{tmp_path / 'store.db'}")
    with engine.connect() as c:
        assert c.execute(sa.text("SELECT count(*) FROM trajectories")).scalar() == 1
    engine.dispose()


def test_a_refused_store_connection_leaves_no_running_mlflow_run(tmp_path):
    with socket_port() as port:  # a port nobody listens on: the connection is refused
        cfg = _cfg(tmp_path, store_url=f"postgresql+psycopg://u:pw@127.0.0.1:{port}/db")
        with pytest.raises(Exception, match="(?i)connect|refused") as err:
            RunTracker(cfg)
    # `err` keeps the traceback (and so the half-built tracker) alive, as a CLI printing the error does:
    # the run must be ended by the tracker itself, not by the garbage collector finalising its generator
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    [run] = client.search_runs([client.get_experiment_by_name("envace").experiment_id])
    assert run.info.status == "FAILED"
    assert err.value is not None


class socket_port:
    """A free TCP port on 127.0.0.1, bound (so nothing else takes it) but not listening."""

    def __enter__(self) -> int:
        import socket

        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        return self.sock.getsockname()[1]

    def __exit__(self, *exc) -> None:
        self.sock.close()


KILLED_EARLY = textwrap.dedent("""
    import sys, time
    from envace.trainers.config import TrainConfig
    from envace.trainers.run_tracker import RunTracker
    tmp = sys.argv[1]
    cfg = TrainConfig.model_validate({"model": tmp + "/unused", "out_dir": tmp + "/run", "tracking": {
        "mlflow_uri": f"sqlite:///{tmp}/mlflow.db", "store_url": tmp + "/store.db"}})
    tracker = RunTracker(cfg)
    tracker.flush()
    print(tracker.mlflow_run_id, tracker.run_id, flush=True)
    time.sleep(600)
""")


def test_a_run_sigkilled_before_its_first_checkpoint_is_closed_by_the_next_start(tmp_path):
    script = tmp_path / "early.py"
    script.write_text(KILLED_EARLY)
    proc = subprocess.Popen([sys.executable, str(script), str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        old_mlflow, old_store = proc.stdout.readline().split()
    finally:
        proc.kill()
        proc.wait()
    assert _mlflow_status(tmp_path, old_mlflow) == "RUNNING"  # nothing could run in the killed process
    tracker = RunTracker(_cfg(tmp_path))  # the restart: no checkpoint to resume from, so a new run
    tracker.close()
    assert tracker.mlflow_run_id != old_mlflow
    assert _mlflow_status(tmp_path, old_mlflow) == "KILLED"
    assert _mlflow_status(tmp_path, tracker.mlflow_run_id) == "FINISHED"
    assert _store_statuses(tmp_path / "store.db") == {old_store: "killed", tracker.run_id: "finished"}


@pytest.mark.slow
def test_sigterm_during_training_ends_both_runs_killed(tiny_model_dir, tmp_path):
    out = tmp_path / "run"
    args = [sys.executable, "-m", "envace.cli", "train", f"model={tiny_model_dir}", f"out_dir={out}", "steps=500",
            "save_every=500", "prompts_per_step=1", "k=2", "threads=1", "progress=false", "data.n_tasks=10",
            "rollout.max_assistant_turns=1", "rollout.act.max_new_tokens=8", "rollout.rehearse.max_new_tokens=8",
            f"tracking.mlflow_uri=sqlite:///{tmp_path / 'mlflow.db'}"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "MLFLOW_ENABLE_TELEMETRY": "false", "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        store = out / "store.db"
        while not (store.is_file() and _store_with_trajectories(store)):  # training has stored a step
            assert proc.poll() is None, proc.communicate()[1][-3000:]
            time.sleep(0.5)
        proc.send_signal(signal.SIGTERM)
        _out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 128 + signal.SIGTERM, err[-3000:]
    [(store_id, status)] = _store_statuses(store).items()
    assert status == "killed"
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    [run] = client.search_runs([client.get_experiment_by_name("envace").experiment_id])
    assert run.info.status == "KILLED" and run.data.tags["envace.store_run_id"] == store_id


def _store_with_trajectories(db) -> bool:
    try:
        engine = sa.create_engine(f"sqlite:///{db}")
        try:
            with engine.connect() as c:
                return bool(c.execute(sa.text("SELECT count(*) FROM trajectories")).scalar())
        finally:
            engine.dispose()
    except sa.exc.OperationalError:  # the schema is being created
        return False
