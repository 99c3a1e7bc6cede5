"""SIGTERM stops `envace sweep run` while cells train: the process exits with 143, a training cell stops
mid-run (fewer steps than asked), its MLflow run and its store run end KILLED, the parent run ends KILLED, and
no process of the command is left (the pool's workers and their Prefect servers included). With one worker
(cells in a thread) the second cell never starts; with two (a process pool) both cells are running and both
end KILLED. The real command runs in a subprocess with the toy trainer."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from envace.sweeps.cells import executions

pytestmark = pytest.mark.flows
REPO = Path(__file__).resolve().parents[2]
STEPS = 100_000  # far more than run before the signal


def _past_step(cell: Path, step: int) -> bool:
    """A checkpoint of at least `step` exists (older ones are pruned as training goes on)."""
    return any(int(d.name.split("_")[1]) >= step for d in (cell / "checkpoints").glob("step_*") if d.is_dir())


def _session(pid: int) -> list[str]:
    """Command lines of the processes left in the session `pid` led."""
    return subprocess.run(["pgrep", "-a", "-s", str(pid)], capture_output=True, text=True).stdout.splitlines()


@pytest.mark.parametrize("workers", [1, pytest.param(2, marks=pytest.mark.slow)])
def test_sigterm_stops_the_sweep_and_marks_its_running_cells_killed(write_sweep, tmp_path, workers):
    from mlflow.tracking import MlflowClient

    axes = {"variant": {"a": [f"steps={STEPS}"], "b": [f"steps={STEPS}", "algo.use_kl=true"]}}
    path = write_sweep(tmp_path, "long", axes, max_workers=workers)
    cells = [tmp_path / "sweep" / "cells" / f"variant-{v}_seed-0" for v in ("a", "b")]
    running = cells[:workers]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    env.pop("PREFECT_API_URL", None)
    proc = subprocess.Popen([sys.executable, "-m", "envace.cli", "sweep", "run", str(path)], cwd=REPO, env=env,
                            stdout=subprocess.DEVNULL, stderr=(tmp_path / "stderr.txt").open("w+"), text=True,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 600  # a guard against a hang, not a measurement
        while not all(_past_step(c, 2) for c in running):  # training is under way, runs are open
            assert proc.poll() is None, proc.communicate()[1][-3000:]
            assert time.monotonic() < deadline, "the cells never reached their second step"
            time.sleep(0.5)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=300)
        end = time.monotonic() + 10  # helpers (multiprocessing's resource tracker) exit once the parent is gone
        while (left := _session(proc.pid)) and time.monotonic() < end:
            time.sleep(0.5)
    finally:
        if proc.poll() is None or _session(proc.pid):
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    err = (tmp_path / "stderr.txt").read_text()
    assert proc.returncode == 143, err[-3000:]
    assert left == [], f"processes of the command left running: {left}"
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    runs = {r.info.run_name: r for e in client.search_experiments() for r in client.search_runs([e.experiment_id])}
    names = [c.name for c in running]
    assert set(runs) == {"long", *names}  # the parent and the running cells; with one worker b never started
    assert {name: r.info.status for name, r in runs.items()} == {"long": "KILLED", **{n: "KILLED" for n in names}}
    for name in names:
        steps = [m.step for m in client.get_metric_history(runs[name].info.run_id, "reward/mean")]
        assert 2 <= max(steps) < STEPS - 1
    with sqlite3.connect(tmp_path / "sweep" / "store.db") as db:
        assert sorted(db.execute("select name, status from runs").fetchall()) == [(n, "killed") for n in names]
    for cell in running:
        assert [e["status"] for e in executions(cell) if e["event"] == "end"] == ["error"]
    if workers == 1:
        assert executions(cells[1]) == []
    assert json.loads((tmp_path / "sweep" / "sweep_state.json").read_text())["parent_run_id"] == \
        runs["long"].info.run_id
