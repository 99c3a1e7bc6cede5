"""How an MLflow run ends (issue 16, item 7): FINISHED, FAILED with the (masked) error as a tag, FAILED by
`mark_failed`, KILLED on Ctrl-C and on a real SIGTERM delivered to this process, with the default SIGTERM
disposition restored afterwards."""

from __future__ import annotations

import os
import signal

import pytest
from mlflow.tracking import MlflowClient

from envace.tracking.lifecycle import RunOutcome, Terminated, outcome_of
from envace.tracking.mlflow_run import start_run


def _run(tmp_path, run_id):
    return MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}").get_run(run_id)


def test_outcomes_of_exits():
    assert [outcome_of(e) for e in (None, SystemExit(0), KeyboardInterrupt(), Terminated(), SystemExit(2),
                                    ValueError())] == [RunOutcome.FINISHED, RunOutcome.FINISHED, RunOutcome.KILLED,
                                                       RunOutcome.KILLED, RunOutcome.FAILED, RunOutcome.FAILED]
    assert Terminated().code == 143 and RunOutcome.KILLED.store_status == "killed"


def test_an_exception_ends_failed_with_the_masked_error(tmp_path):
    with pytest.raises(ConnectionError):
        with start_run(tmp_path, "e", "r") as run:
            raise ConnectionError("cannot reach postgresql://u:PASSWORD@db/x")
    r = _run(tmp_path, run.run_id)
    assert r.info.status == "FAILED"
    assert r.data.tags["envace.error"] == "ConnectionError: cannot reach postgresql://u:***@db/x"


def test_mark_failed_ends_failed_on_a_normal_exit(tmp_path):
    with start_run(tmp_path, "e", "r") as run:
        run.mark_failed("2 of 3 cells failed")
    r = _run(tmp_path, run.run_id)
    assert (r.info.status, r.data.tags["envace.failure"]) == ("FAILED", "2 of 3 cells failed")


def test_a_real_sigterm_ends_the_run_killed(tmp_path):
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        pytest.skip("the test runner has its own SIGTERM handler")
    with pytest.raises(Terminated):
        with start_run(tmp_path, "e", "r") as run:
            os.kill(os.getpid(), signal.SIGTERM)
            for _ in range(1000):  # the handler runs between bytecodes of the main thread
                pass
    assert _run(tmp_path, run.run_id).info.status == "KILLED"
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # restored: no handler outlives the run
