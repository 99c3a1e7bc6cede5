"""How an MLflow run ends: FINISHED, FAILED with the (masked) error as a tag, FAILED by `mark_failed`, KILLED on
Ctrl-C and on a real SIGTERM delivered to this process, with the default SIGTERM disposition restored afterwards.

The SIGTERM tests need the default disposition while they run (`sigterm_raises` leaves a foreign handler alone).
A handler already installed in the test process (a test runner's, or one a library imported by an earlier
test leaves behind) is set aside for the test and put back after it, so these tests run in every order and
every runner instead of skipping."""

from __future__ import annotations

import os
import signal
import sys
import time

import pytest
from mlflow.tracking import MlflowClient

from envace.tracking import lifecycle
from envace.tracking.lifecycle import RunOutcome, Terminated, outcome_of, sigterm_raises
from envace.tracking.mlflow_run import start_run


@pytest.fixture
def default_sigterm():
    previous = signal.signal(signal.SIGTERM, signal.SIG_DFL)
    yield
    signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)


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


def test_a_real_sigterm_ends_the_run_killed(tmp_path, default_sigterm):
    with pytest.raises(Terminated):
        with start_run(tmp_path, "e", "r") as run:
            os.kill(os.getpid(), signal.SIGTERM)
            for _ in range(1000):  # the handler runs between bytecodes of the main thread
                pass
    assert _run(tmp_path, run.run_id).info.status == "KILLED"
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # restored: no handler outlives the run


class _RaisesTheSignalWhileCollected:
    """Delivers SIGTERM from inside `__del__`: the handler then runs inside the finaliser, where Python prints an
    exception as "Exception ignored in ..." and goes on (the CI failure: the signal landed in a SQLAlchemy
    weakref callback, the run went on to exit 0)."""

    def __del__(self):
        signal.raise_signal(signal.SIGTERM)
        len([])  # a call: the pending handler runs here, inside the finaliser


def test_a_sigterm_landing_in_a_finaliser_is_not_lost(tmp_path, default_sigterm):
    reached_the_end = False
    with pytest.raises(Terminated) as raised:
        with sigterm_raises():
            doomed = _RaisesTheSignalWhileCollected()
            del doomed  # finalised here; the Terminated raised inside it is swallowed by Python
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:  # the handler is scheduled again and runs in this loop
                pass
            reached_the_end = True
    assert not reached_the_end and raised.value.code == 128 + signal.SIGTERM
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


def test_a_signal_deferred_from_a_database_call_wakes_a_main_thread_blocked_in_a_wait(monkeypatch, default_sigterm):
    """A SIGTERM that lands in a database call is delivered again later; by then the main thread may sit in a
    blocking wait (a flow waiting for its cells). The retry must wake it, not only flag it: the wait below
    would otherwise run its whole 60 s and the run would go on until the cells end."""
    import threading

    calls = []
    monkeypatch.setattr(lifecycle, "_in_database", lambda frame: not calls and not calls.append(frame))
    blocked = threading.Event()
    started = time.monotonic()
    with pytest.raises(Terminated):
        with sigterm_raises():
            os.kill(os.getpid(), signal.SIGTERM)  # lands "in a database call": deferred
            blocked.wait(timeout=60)  # never set: only the signal can end it
    assert len(calls) == 1 and time.monotonic() - started < 30  # woken, not timed out


def test_a_block_that_ends_before_the_retry_lands_raises_as_it_exits(monkeypatch, default_sigterm):
    monkeypatch.setattr(lifecycle, "_RETRY_AFTER_S", 600.0)
    with pytest.raises(Terminated):
        with sigterm_raises():
            doomed = _RaisesTheSignalWhileCollected()
            del doomed
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


def test_exceptions_swallowed_in_finalisers_still_reach_the_previous_hook():
    seen = []
    previous, sys.unraisablehook = sys.unraisablehook, lambda unraisable: seen.append(unraisable.exc_type)
    try:
        with sigterm_raises():
            class Broken:
                def __del__(self):
                    raise ValueError("from a finaliser")
            broken = Broken()
            del broken
        assert seen == [ValueError]
    finally:
        sys.unraisablehook = previous
