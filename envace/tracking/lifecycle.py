"""How a tracked run ends: FINISHED, FAILED or KILLED, decided from the way its block exits, and SIGTERM
turned into an exception so that the block does exit (and its `finally` / context managers run) when a
scheduler, `kill` or a container stop terminates the process.

- normal exit, or `SystemExit` with code 0/None: FINISHED
- `KeyboardInterrupt` (Ctrl-C) or `Terminated` (SIGTERM, via `sigterm_raises`): KILLED
- any other exception (a non-zero `SystemExit` included): FAILED

A signal handler runs wherever the main thread happens to be, a finaliser or a weakref callback included
(SQLAlchemy's registry callbacks, a `__del__`), and there Python prints the exception as "Exception ignored
in ..." and goes on: the SIGTERM would be lost and the run would carry on to a normal exit. While the block
runs, a `sys.unraisablehook` catches such a `Terminated` and schedules the handler again
(a real signal to the main thread, `signal.pthread_kill`: unlike `_thread.interrupt_main`, which only sets
a flag, it also wakes a main thread blocked in a wait, such as a flow waiting for its cells), so it is
raised in the block's own code; other swallowed exceptions go
to the hook that was there before. A short timer thread does the scheduling (calling it from the hook
would run the handler again at once, inside the hook); a block that ends before the retry lands raises
`Terminated` as it exits.

A SIGTERM that lands inside a database call (SQLAlchemy, sqlite3: a tracking write in progress) is
delivered the same way a moment later, once the call has returned.

A SIGKILL cannot be caught; what is left RUNNING then is closed by the next start in the same run
directory (`envace.trainers.run_tracker.RunTracker` marks its predecessor's runs KILLED).
"""

from __future__ import annotations

import signal
import sys
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
    retrying: int | None = None  # the signal whose delivery is being tried again
    timers: list[threading.Timer] = []
    previous_hook = sys.unraisablehook

    def _raise(signum, frame):  # noqa: ANN001 - signal handler signature
        nonlocal fired, retrying
        if fired:
            return
        # the unraisable hook would swallow it too; inside a database call (a commit) it would leave SQLite's
        # write lock held and the run's own KILLED update would fail "database is locked": deliver it later
        if _inside(frame, _raise_again.__code__) or _in_database(frame):
            _retry_soon(signum)
            return
        fired, retrying = True, None
        raise Terminated(signum)

    def _raise_again(unraisable) -> None:  # noqa: ANN001 - sys.UnraisableHookArgs
        nonlocal fired
        if isinstance(unraisable.exc_value, Terminated) and fired:
            fired = False  # not delivered: arm the handler again
            _retry_soon(unraisable.exc_value.signum)
            return
        previous_hook(unraisable)

    def _retry_soon(signum: int) -> None:
        """Run the handler again from another thread a moment later, once the main thread has left the
        finaliser (signalling from the hook itself would run the handler again inside it, or inside itself)."""
        nonlocal retrying
        retrying = signum
        timer = threading.Timer(_RETRY_AFTER_S, signal.pthread_kill, (threading.main_thread().ident, signum))
        timer.daemon = True
        timers.append(timer)
        timer.start()

    signal.signal(signal.SIGTERM, _raise)
    sys.unraisablehook = _raise_again
    try:
        yield
        if retrying is not None:  # the block ended before the retry landed: end it here instead
            fired = True
            raise Terminated(retrying)
    finally:
        for timer in timers:
            timer.cancel()
        if sys.unraisablehook is _raise_again:  # unless someone installed theirs on top meanwhile
            sys.unraisablehook = previous_hook
        if threading.current_thread() is threading.main_thread():  # signal.signal fails off the main thread
            signal.signal(signal.SIGTERM, previous)


_RETRY_AFTER_S = 0.01


DATABASE_CODE = ("/sqlalchemy/", "/sqlite3/")


def _in_database(frame) -> bool:  # noqa: ANN001 - a frame object or None
    while frame is not None:
        if any(part in frame.f_code.co_filename for part in DATABASE_CODE):
            return True
        frame = frame.f_back
    return False


def _inside(frame, code) -> bool:  # noqa: ANN001 - a frame object or None
    while frame is not None:
        if frame.f_code is code:
            return True
        frame = frame.f_back
    return False
