"""A second Python process that runs one job beside this one: started early, it imports what the job needs
while this process still works on one core, then runs the job when it is handed over and sends back its
result.

Why a process and not a thread: the demo's two arms after SFT (EnvACE RL, then the real-environment GRPO
baseline) are independent, and each alone keeps about 1.4 of 2 cores busy (its rollouts are Python
between small torch ops); two threads would share one interpreter lock and one torch default generator,
two processes share neither, so each lane's numbers are what it computes alone at one torch thread.
The child is started with `spawn` (never a fork of a process that holds threads) and with
ENVACE_CPU_JOBS set to the lanes on the machine (envace.cpu_threads), so it takes its share of the cores.

Errors: an exception in the job, or in an import asked for before it (`preload`), is raised again from
`result()` with the child's traceback in its message; a child that dies without an answer is a
RuntimeError naming its exit code; `close()` ends a child still running (the caller failed first).
This is an execution choice of the embedded CPU backend, not part of the method.
"""

from __future__ import annotations

import importlib
import multiprocessing
import traceback
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection
from typing import Any

from envace.cpu_threads import apply_thread_policy, cpu_jobs


def _import_all(modules: Sequence[str]) -> str | None:
    """Import `modules`; the first failure as an error report (None when all imported)."""
    try:
        for name in modules:
            importlib.import_module(name)
    except Exception as exc:  # reported with the next job's answer
        return f"importing {name} failed: {type(exc).__name__}: {exc}\n{traceback.format_exc()}"
    return None


def _serve(conn: Connection) -> None:
    """The child: thread policy, then one job (fn, args) at a time until told to stop (None). A job with fn
    None imports `args` and answers nothing; a failed import is the answer to the job after it."""
    apply_thread_policy(None)
    failed = None
    while (job := conn.recv()) is not None:
        fn, args = job
        if fn is None:
            failed = failed or _import_all(args)
            continue
        if failed:
            conn.send(("error", failed))
            failed = None
            continue
        try:
            conn.send(("ok", fn(*args)))
        except Exception as exc:  # every failure goes back to the parent, which raises it
            conn.send(("error", f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"))


class SideProcess:
    """One child process for jobs that run beside the caller's own work (`submit`, then `result`)."""

    def __init__(self, jobs: int, modules: Sequence[str] = ()) -> None:
        """Start the child at once; it imports `modules` while the caller goes on (`preload`). `jobs`: how many
        envace jobs share the machine while it works (the child's torch threads are its share)."""
        ctx = multiprocessing.get_context("spawn")
        self._conn, child_conn = ctx.Pipe()
        with cpu_jobs(jobs):  # the child's environment is copied when it starts
            self._proc = ctx.Process(target=_serve, args=(child_conn,), name="envace-side", daemon=True)
            self._proc.start()
        child_conn.close()
        self._busy = False
        if modules:
            self.preload(modules)

    def preload(self, modules: Sequence[str]) -> None:
        """Have the child import `modules` once its current job is done, while the caller goes on (nothing to
        collect; an import that fails is raised by the next `result()`)."""
        self._conn.send((None, list(modules)))

    def submit(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run fn(*args) in the child (fn importable by name, args picklable)."""
        if self._busy:
            raise RuntimeError("the side process is still running a job; call result() first")
        self._conn.send((fn, args))
        self._busy = True

    def result(self) -> Any:
        """The submitted job's return value; its exception, raised here, when it failed."""
        if not self._busy:
            raise RuntimeError("no job was submitted to the side process")
        try:
            status, value = self._conn.recv()
        except (EOFError, ConnectionError):
            self._proc.join(5)
            raise RuntimeError(f"the side process ended (exit code {self._proc.exitcode}) without an answer") from None
        finally:
            self._busy = False
        if status == "error":
            raise RuntimeError(f"the side process's job failed: {value}")
        return value

    def close(self) -> None:
        """Stop the child: asked to finish when it is idle, ended when it is still running a job."""
        if self._proc.is_alive():
            if self._busy:
                self._proc.terminate()
            else:
                try:
                    self._conn.send(None)
                except OSError:
                    self._proc.terminate()
            self._proc.join(10)
            if self._proc.is_alive():
                self._proc.kill()
                self._proc.join()
        self._conn.close()

    def __enter__(self) -> SideProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
