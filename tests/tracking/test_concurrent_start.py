"""Runs started together on a new directory: every process creates its run in the one
default MLflow database; none dies while MLflow creates the schema."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time

from mlflow.tracking import MlflowClient

N = 3

WORKER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from envace.tracking.mlflow_run import start_run

    directory, ready, go, i = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]), int(sys.argv[4])
    ready.touch()
    while not go.exists():  # every process has imported MLflow; now they all open the new database at once
        time.sleep(0.005)
    with start_run(directory, "together", f"run-{i}", {"i": i}) as run:
        run.log_step_metrics(1, {"x": i})
    print(run.run_id)
""")


def test_processes_started_together_on_a_new_directory_all_succeed(tmp_path):
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    directory = tmp_path / "fresh" / "mlruns"  # does not exist yet: the first process creates it
    go = tmp_path / "go"
    procs, readies = [], []
    for i in range(N):
        ready = tmp_path / f"ready{i}"
        readies.append(ready)
        procs.append(subprocess.Popen([sys.executable, str(script), str(directory), str(ready), str(go), str(i)],
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    try:
        while not all(r.exists() for r in readies):
            assert all(p.poll() is None for p in procs), [p.communicate() for p in procs if p.poll() is not None]
            time.sleep(0.05)
        go.touch()
        outs = [p.communicate(timeout=300) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    failures = [(p.returncode, err[-2000:]) for p, (_out, err) in zip(procs, outs) if p.returncode != 0]
    assert failures == []
    run_ids = [out.strip().splitlines()[-1] for out, _err in outs]
    client = MlflowClient(f"sqlite:///{directory / 'mlflow.db'}")
    runs = {r.info.run_id: r for r in client.search_runs([client.get_experiment_by_name("together").experiment_id])}
    assert sorted(runs) == sorted(run_ids)
    assert sorted(r.data.params["i"] for r in runs.values()) == [str(i) for i in range(N)]
    assert all(r.info.status == "FINISHED" for r in runs.values())
