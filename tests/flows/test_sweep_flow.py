"""Ablation sweeps on Prefect's real engine with the real embedded trainer (+ evaluator) as the cell:
child runs under one MLflow parent, cache hits on a re-run (also from a new process), failure isolation,
the concurrency limit, and the results table checked against the child runs' own metrics."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from mlflow.tracking import MlflowClient

from envace.sweeps.cells import executions
from envace.sweeps.grid import slugify
from envace.tracking.mlflow_run import PARENT_TAG, child_runs

pytestmark = pytest.mark.flows

# a valid config whose cell fails when it runs: its frozen simulator's model dir does not exist
MISSING_SIMULATOR = ["rollout.mode=simulator", "rollout.simulator_model=/nonexistent/simulator"]

TWO_CELLS = {"variant": {"envace": [], "grpo_env": ["rollout.mode=env", "algo.advantage=grpo"]}}
NAMES = ["variant=envace,seed=0", "variant=grpo_env,seed=0"]


def starts(summary: dict, name: str) -> list[dict]:
    return [e for e in executions(Path(summary["out_dir"]) / "cells" / slugify(name)) if e["event"] == "start"]


def client_for(path: Path) -> MlflowClient:
    return MlflowClient(tracking_uri=f"sqlite:///{path.parent / 'mlflow.db'}")


@pytest.fixture(scope="module", autouse=True)
def pinned_code_version():
    """Other work in this tree edits envace/*.py while the tests run; pin the code version so the
    cache tests see a stable key (code-version detection itself: tests/sweeps/test_cache.py)."""
    from envace.sweeps.cache import CODE_VERSION_ENV

    old = os.environ.get(CODE_VERSION_ENV)
    os.environ[CODE_VERSION_ENV] = "pinned-for-test"  # the subprocess test inherits it
    yield
    if old is None:
        os.environ.pop(CODE_VERSION_ENV, None)
    else:
        os.environ[CODE_VERSION_ENV] = old


@pytest.fixture(scope="module")
def two_cell(prefect_harness, write_sweep, toy_eval, tmp_path_factory):
    from envace_flows.sweep import run_sweep_from_file

    path = write_sweep(tmp_path_factory.mktemp("two_cell"), "two-cell", TWO_CELLS, eval_overrides=toy_eval)
    return path, run_sweep_from_file(path)


def test_two_cells_land_two_child_runs_under_one_parent(two_cell):
    path, summary = two_cell
    assert summary["failed"] == {}
    assert sorted(summary["executed"]) == sorted(NAMES) and summary["cached"] == []
    uri = f"sqlite:///{path.parent / 'mlflow.db'}"
    kids = child_runs(uri, summary["parent_run_id"])
    assert len(kids) == 2
    assert set(kids) == set(summary["child_runs"].values())
    client = client_for(path)
    for run_id in kids:
        run = client.get_run(run_id)
        assert run.data.tags[PARENT_TAG] == summary["parent_run_id"]
        assert run.info.status == "FINISHED"
        assert "reward/mean" in run.data.metrics  # the trainer's own per-step metrics
        assert "eval/world/success" in run.data.metrics  # the evaluation of the final checkpoint
    parent_files = {a.path for a in client.list_artifacts(summary["parent_run_id"], "sweep")}
    assert {"sweep/results.csv", "sweep/results.html", "sweep/cells.csv"} <= parent_files


def test_results_table_matches_child_run_metrics(two_cell):
    path, summary = two_cell
    table = pd.read_csv(summary["results_csv"])
    client = client_for(path)
    for name, run_id in summary["child_runs"].items():
        group = name.rsplit(",seed=", 1)[0]
        row = table[(table["group"] == group) & (table["metric"] == "eval/world/success")].iloc[0]
        assert row["n"] == 1  # one seed: mean is the value, the CI is undefined
        assert row["mean"] == pytest.approx(client.get_run(run_id).data.metrics["eval/world/success"])
        assert pd.isna(row["ci95"])


def test_curves_artifact_holds_each_arms_logged_history(two_cell):
    path, summary = two_cell
    client = client_for(path)
    assert "sweep/curves.csv" in {a.path for a in client.list_artifacts(summary["parent_run_id"], "sweep")}
    curves = pd.read_csv(Path(summary["results_csv"]).parent / "curves.csv")
    for name, run_id in summary["child_runs"].items():  # one seed per arm: the curve is the run's own history
        group = name.rsplit(",seed=", 1)[0]
        for metric in ("reward/mean", "act/entropy"):
            logged = sorted((m.step, m.value) for m in client.get_metric_history(run_id, metric))
            part = curves[(curves["group"] == group) & (curves["metric"] == metric)].sort_values("step")
            assert logged and part["step"].tolist() == [s for s, _ in logged]
            assert part["mean"].tolist() == pytest.approx([v for _, v in logged]) and set(part["n"]) == {1}
    shadow = curves[curves["metric"] == "shadow/exact_match"]
    assert set(shadow["group"]) <= {"variant=envace"}  # the real-world replay runs in rehearse mode only


def test_cells_never_overlap_with_max_workers_1(two_cell):
    _, summary = two_cell
    spans = sorted((e["start"], e["t"]) for n in NAMES
                   for e in executions(Path(summary["out_dir"]) / "cells" / slugify(n)) if e["event"] == "end")
    assert len(spans) == 2
    assert spans[0][1] <= spans[1][0]  # the second cell started after the first had ended


def test_rerun_executes_no_finished_cell(two_cell):
    from envace_flows.sweep import run_sweep_from_file

    path, first = two_cell
    again = run_sweep_from_file(path)
    assert again["executed"] == [] and sorted(again["cached"]) == sorted(NAMES)
    assert again["parent_run_id"] == first["parent_run_id"]  # the parent run is resumed, not duplicated
    assert again["child_runs"] == first["child_runs"]
    for name in NAMES:
        assert len(starts(again, name)) == 1  # executed once, by the first run
    assert len(child_runs(f"sqlite:///{path.parent / 'mlflow.db'}", first["parent_run_id"])) == 2
    table_again = pd.read_csv(again["results_csv"])
    assert set(table_again["group"]) == {"variant=envace", "variant=grpo_env"}


@pytest.mark.slow
def test_rerun_in_a_new_process_is_cached(two_cell):
    """The cache lives in the sweep's result storage, not in the Python process or the Prefect database."""
    from prefect.settings import PREFECT_API_URL

    path, first = two_cell
    code = ("import json, sys; from envace_flows.sweep import run_sweep_from_file; "
            "print('SUMMARY=' + json.dumps(run_sweep_from_file(sys.argv[1]), default=str))")
    env = {**os.environ, "PREFECT_API_URL": PREFECT_API_URL.value()}
    proc = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, env=env,
                          cwd=Path(__file__).resolve().parents[2], timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("SUMMARY=")][-1]
    summary = json.loads(line[len("SUMMARY="):])
    assert summary["executed"] == [] and sorted(summary["cached"]) == sorted(NAMES)
    for name in NAMES:
        assert len(starts(first, name)) == 1


def test_failing_cell_does_not_stop_the_others(prefect_harness, write_sweep, tmp_path):
    from envace_flows.sweep import run_sweep_from_file

    # 'bad' is first and fails when it runs: its simulator model dir does not exist (its config is valid)
    axes = {"variant": {"bad": MISSING_SIMULATOR, "envace": []}}
    path = write_sweep(tmp_path, "with-failure", axes)
    summary = run_sweep_from_file(path)
    bad, good = "variant=bad,seed=0", "variant=envace,seed=0"
    assert list(summary["failed"]) == [bad]
    assert "/nonexistent/simulator" in summary["failed"][bad]
    assert summary["cells"] == {bad: "failed", good: "completed"}
    kids = child_runs(f"sqlite:///{tmp_path / 'mlflow.db'}", summary["parent_run_id"])
    assert kids == [summary["child_runs"][good]]
    table = pd.read_csv(summary["results_csv"])
    assert set(table["group"]) == {"variant=envace"}
    parent = client_for(path).get_run(summary["parent_run_id"])
    assert json.loads(parent.data.tags["envace.failed_cells"]) == [bad]

    # a failed cell is not cached: the re-run executes it again (and fails again), the good one is cached
    again = run_sweep_from_file(path)
    assert again["cells"] == {bad: "failed", good: "cached"}
    assert len(starts(again, bad)) == 2 and len(starts(again, good)) == 1


def test_changed_config_reruns_only_changed_cells(prefect_harness, write_sweep, tmp_path):
    from envace_flows.sweep import run_sweep_from_file

    path = write_sweep(tmp_path, "grow", {"variant": {"envace": []}})
    first = run_sweep_from_file(path)
    assert first["executed"] == ["variant=envace,seed=0"]
    path = write_sweep(tmp_path, "grow", {"variant": {"envace": [], "kl_on": ["algo.use_kl=true"]}})
    second = run_sweep_from_file(path)
    assert second["cells"] == {"variant=envace,seed=0": "cached", "variant=kl_on,seed=0": "completed"}
    assert len(child_runs(f"sqlite:///{tmp_path / 'mlflow.db'}", first["parent_run_id"])) == 2


@pytest.mark.slow
def test_parallel_cells_run_in_worker_processes(prefect_harness, write_sweep, tmp_path):
    """max_workers > 1 uses a process pool: two training cells in threads of one process break model
    loading (transformers' meta-device init is process-global), in processes they both finish."""
    from envace_flows.sweep import run_sweep_from_file

    path = write_sweep(tmp_path, "parallel", TWO_CELLS, max_workers=2)
    summary = run_sweep_from_file(path)
    assert summary["failed"] == {} and sorted(summary["executed"]) == sorted(NAMES)
    pids = {e["pid"] for n in NAMES for e in starts(summary, n)}
    assert os.getpid() not in pids  # the cells ran in the pool's worker processes
    assert len(child_runs(f"sqlite:///{tmp_path / 'mlflow.db'}", summary["parent_run_id"])) == 2
