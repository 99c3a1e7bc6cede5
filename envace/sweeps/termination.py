"""SIGTERM stops a running sweep within seconds, its running cells ending KILLED in MLflow and the store.

Without this, Prefect's flow engine turns the SIGTERM into an exception in the main thread only, where the
flow waits for its cells; the task runner then waits for the cells' worker threads to finish training, so
the sweep ran on (and the cells ended FINISHED) after it was asked to stop. `stop_cells_on_sigterm`, called
in the flow's main thread, installs a handler for the rest of the flow run (Prefect restores its own when
the flow ends) that, on the first SIGTERM:

- raises `Terminated` (envace.tracking.lifecycle) in every thread running sweep code (a cell, an SFT build,
  a worldbench build: found by their frames, `cell_threads`), at its next Python instruction outside the
  tracking store's and MLflow's database code (inside a transaction the exception would leave the SQLite
  write lock held), so a training loop stops between tensor operations and its RunTracker / MLflow run
  end KILLED as for a SIGTERM of `envace train` (the store run too);
- sends SIGTERM to the worker processes of a process-pool runner: a cell running there has its run's
  SIGTERM handling installed and ends KILLED the same way. A pool worker outlives its task, so once every
  worker's cells have their end event (executions.jsonl; after REAP_LIMIT_S in any case) the workers still
  alive are stopped, the ephemeral Prefect server each started first, and once the main thread has
  finished the process ends with 143 (the pool's queue threads would hold the interpreter's exit);
- raises `Terminated` in the main thread, so the sweep's parent run ends KILLED and the command exits with
  status 143.
A second SIGTERM while that happens stops the process at once. Departure: raising an exception in another
thread (`PyThreadState_SetAsyncExc`) is CPython's own mechanism and interrupts Python code only; a single
long native operation finishes first. Cells on a Ray cluster are not reached (Ray cancels its own tasks
when the driver goes).
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import multiprocessing
import os
import signal
import sys
import threading
import time
from pathlib import Path

from envace.tracking.lifecycle import Terminated

SWEEP_CODE = Path(__file__).resolve().parent  # envace/sweeps: cells, SFT builds, worldbench builds
_SKIP = ("termination.py",)
REAP_POLL_S = 0.2
TRACKING_CODE = ("/sqlalchemy/", "/sqlite3/", "/mlflow/", "/envace/store/", "/envace/tracking/")
DEFER_POLL_S = 0.01
DEFER_LIMIT_S = 5.0
REAP_LIMIT_S = 30.0
EXIT_GRACE_S = 5.0


def _runs_sweep_code(frame) -> bool:  # noqa: ANN001 - a frame object
    while frame is not None:
        path = Path(frame.f_code.co_filename)
        if path.parent == SWEEP_CODE and path.name not in _SKIP:
            return True
        frame = frame.f_back
    return False


def cell_threads() -> list[int]:
    """Idents of the threads other than the main one whose stack holds sweep code (a running cell)."""
    main = threading.main_thread().ident
    return [ident for ident, frame in sys._current_frames().items() if ident != main and _runs_sweep_code(frame)]


def raise_in_thread(ident: int, exc_type: type[BaseException]) -> bool:
    """Schedule `exc_type` to be raised in thread `ident` at its next Python instruction."""
    return ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(ident), ctypes.py_object(exc_type)) == 1


def _in_tracking_write(frame) -> bool:  # noqa: ANN001 - a frame object
    while frame is not None:
        name = frame.f_code.co_filename
        if any(part in name for part in TRACKING_CODE):
            return True
        frame = frame.f_back
    return False


def _interrupt_when_safe(ident: int) -> None:
    """Raise Terminated in thread `ident` once it is outside database code (an exception inside a
    transaction leaves its connection holding the write lock, and the run's own KILLED update then waits
    for that lock); after DEFER_LIMIT_S, raise it wherever the thread is."""
    deadline = time.monotonic() + DEFER_LIMIT_S
    while (frame := sys._current_frames().get(ident)) is not None:
        if not _in_tracking_write(frame) or time.monotonic() > deadline:
            raise_in_thread(ident, Terminated)
            return
        del frame
        time.sleep(DEFER_POLL_S)


def open_cells(cells_dir: Path, pids: set[int]) -> list[str]:
    """Cells whose last execution event from one of `pids` is a start: still running or closing their runs
    (envace.sweeps.cells.execution_record writes the events)."""
    out = []
    for log in sorted(cells_dir.glob("*/executions.jsonl")):
        last: dict[int, str] = {}
        for line in log.read_text().splitlines():
            try:
                event = json.loads(line)
            except ValueError:  # a line being written
                continue
            if event.get("pid") in pids:
                last[event["pid"]] = event.get("event", "")
        if "start" in last.values():
            out.append(log.parent.name)
    return out


def _children_of(pid: int) -> list[int]:
    """Direct child processes of `pid` (Linux /proc; none elsewhere)."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[1]) == pid:
            out.append(int(stat.parent.name))
    return out


def _reap(children: list[multiprocessing.Process], cells_dir: Path) -> None:
    """Once no worker has a cell without its end event (each closed its runs), or after REAP_LIMIT_S, stop
    the workers still alive: their own child processes (the ephemeral Prefect server a worker starts) with
    SIGTERM, then the worker itself. Then, once the main thread has finished and the exit handlers had
    EXIT_GRACE_S, end the process: a pool whose workers were killed holds the exit in its queue threads."""
    deadline = time.monotonic() + REAP_LIMIT_S
    while alive := [c for c in children if c.is_alive()]:
        if time.monotonic() > deadline or not open_cells(cells_dir, {c.pid for c in alive if c.pid}):
            for child in alive:
                for grandchild in _children_of(child.pid or 0):
                    with contextlib.suppress(OSError):
                        os.kill(grandchild, signal.SIGTERM)
                child.kill()
            while threading.main_thread().is_alive():
                time.sleep(REAP_POLL_S)
            time.sleep(EXIT_GRACE_S)
            os._exit(128 + signal.SIGTERM)
        time.sleep(REAP_POLL_S)


def stop_cells_on_sigterm(out_dir: str | Path) -> bool:
    """Install the handler for the sweep writing to `out_dir` (see the module docstring); False where it
    cannot be (not the main thread)."""
    cells_dir = Path(out_dir).resolve() / "cells"
    if threading.current_thread() is not threading.main_thread():
        return False
    fired: list[int] = []

    def handler(signum: int, frame) -> None:  # noqa: ANN001 - signal handler signature
        if fired:  # asked twice: stop now
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)
            return
        fired.append(signum)
        for ident in cell_threads():
            threading.Thread(target=_interrupt_when_safe, args=(ident,), daemon=True,
                             name=f"envace-sweep-stop-{ident}").start()
        children = multiprocessing.active_children()
        for child in children:
            child.terminate()
        if children:
            threading.Thread(target=_reap, args=(children, cells_dir), name="envace-sweep-reaper", daemon=True).start()
        raise Terminated(signum)

    signal.signal(signal.SIGTERM, handler)
    return True
