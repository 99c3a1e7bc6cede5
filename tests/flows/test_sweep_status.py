"""A sweep with failed cells is a failed command: `envace sweep run` exits non-zero and
the MLflow parent run ends FAILED (with the reason as a tag); a sweep whose cells all succeed stays FINISHED
(tests/flows/test_sweep_flow.py)."""

from __future__ import annotations

import json

import pytest
from mlflow.tracking import MlflowClient
from typer.testing import CliRunner

pytestmark = pytest.mark.flows

# a valid config whose cell fails when it runs: its frozen simulator's model dir does not exist
MISSING_SIMULATOR = ["rollout.mode=simulator", "rollout.simulator_model=/nonexistent/simulator"]


def test_failed_cells_fail_the_command_and_the_parent_run(prefect_harness, write_sweep, tmp_path):
    from envace.cli import app

    # every cell fails inside the flow (its simulator model dir does not exist): quick, but the real flow runs
    path = write_sweep(tmp_path, "all-bad", {"variant": {"bad": MISSING_SIMULATOR}})
    result = CliRunner().invoke(app, ["sweep", "run", str(path)])
    assert result.exit_code == 1, result.output
    assert "1 of 1 sweep cells failed" in result.output
    summary = json.loads((tmp_path / "sweep" / "results" / "summary.json").read_text())
    assert list(summary["failed"]) == ["variant=bad,seed=0"]
    parent = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}").get_run(summary["parent_run_id"])
    assert parent.info.status == "FAILED"
    assert parent.data.tags["envace.failure"] == "1 of 1 cells failed: variant=bad,seed=0"
