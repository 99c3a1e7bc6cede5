"""How a tracked run ends: FINISHED, FAILED or KILLED, decided from the way its block exits, and SIGTERM
turned into an exception so that the block does exit (and its `finally` / context managers run) when a
scheduler, `kill` or a container stop terminates the process.

- normal exit, or `SystemExit` with code 0/None: FINISHED
- `KeyboardInterrupt` (Ctrl-C) or `Terminated` (SIGTERM, via `sigterm_raises`): KILLED
- any other exception (a non-zero `SystemExit` included): FAILED

A SIGKILL cannot be caught; what is left RUNNING then is closed by the next start in the same run
directory (`envace.trainers.run_tracker.RunTracker` marks its predecessor's runs KILLED).
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from enum import Enum


class RunOutcome(str, Enum):
    FINISHED = "FINISHED"
    FAILED = "FAILED"
    KILLED = "KILLED"

    @property
    def store_status(self) -> str:
        """The trajectory store's spelling (`envace.store.models.RunStatus` values are lower case)."""
        return self.value.lower()


class Terminated(SystemExit):
    """Raised in the main thread by the SIGTERM handler of `sigterm_raises`; exits with 128 + signal."""

    def __init__(self, signum: int = signal.SIGTERM) -> None:
        super().__init__(128 + int(signum))
        self.signum = int(signum)


def outcome_of(exc: BaseException | None) -> RunOutcome:
    if exc is None:
        return RunOutcome.FINISHED
    if isinstance(exc, (KeyboardInterrupt, Terminated)):
        return RunOutcome.KILLED
    if isinstance(exc, SystemExit) and exc.code in (0, None):
        return RunOutcome.FINISHED
    return RunOutcome.FAILED


@contextmanager
def sigterm_raises() -> Iterator[None]:
    """While the block runs, SIGTERM raises `Terminated` in the main thread (once: a second SIGTERM during
    the clean-up is ignored, SIGKILL still works). Does nothing off the main thread or when another handler
    than the default is installed (an outer block, or a framework's own)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGTERM)
    if previous not in (signal.SIG_DFL, None):
        yield
        return
    fired = False

    def _raise(signum, _frame):  # noqa: ANN001 - signal handler signature
        nonlocal fired
        if fired:
            return
        fired = True
        raise Terminated(signum)

    signal.signal(signal.SIGTERM, _raise)
    try:
        yield
    finally:
        if threading.current_thread() is threading.main_thread():  # signal.signal fails off the main thread
            signal.signal(signal.SIGTERM, previous)
