"""A progress bar per benchmark on stderr: task runs done / total, errors so far, ETA.

`run_benchmarks` opens one `Progress` per benchmark (`track(name)`); the adapters announce how many task
runs a part will make (`active().add_total(n)`, per category / domain / set, as they load it) and report
each finished run (`active().advance(error=...)`). With no bar open (a library call, a test), `active()`
is a no-op, so the adapters need no extra argument. BFCL's worker threads report to the same bar (one
lock).

On a terminal the bar redraws in place (`\\r`); otherwise (a log file, CI) it prints a full line when
the run starts, at most every `every_s` seconds, and at the end, so a long run is never silent and a
log never fills with redraws. The ETA is the mean time per finished run so far times the runs left.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TextIO

WIDTH = 24


def _duration(seconds: float) -> str:
    s = int(round(seconds))
    if s >= 3600:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"


class Progress:
    def __init__(self, name: str, stream: TextIO | None = None, *, tty: bool | None = None, every_s: float = 30.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.name, self.stream = name, stream if stream is not None else sys.stderr
        self.tty = tty if tty is not None else bool(getattr(self.stream, "isatty", lambda: False)())
        self.every_s, self.clock = every_s, clock
        self.total = self.done = self.errors = 0
        self.started = clock()
        self._last_line = float("-inf")
        self._lock = threading.Lock()

    def add_total(self, n: int) -> None:
        with self._lock:
            self.total += n
            self._draw(force=self.done == 0)

    def advance(self, n: int = 1, *, error: bool = False) -> None:
        with self._lock:
            self.done += n
            self.errors += int(error) * n
            self._draw()

    def line(self) -> str:
        total = max(self.total, self.done)
        filled = WIDTH * self.done // total if total else 0
        elapsed = self.clock() - self.started
        if self.done and total > self.done:
            eta = f"ETA {_duration(elapsed / self.done * (total - self.done))}"
        elif total and self.done >= total:
            eta = f"took {_duration(elapsed)}"
        else:
            eta = "ETA ?"
        return (f"{self.name:<7} [{'#' * filled}{'.' * (WIDTH - filled)}] {self.done}/{total} task runs, "
                f"{self.errors} errors, {eta}")

    def _draw(self, force: bool = False) -> None:
        now = self.clock()
        if self.tty:
            self.stream.write("\r" + self.line())
        elif force or now - self._last_line >= self.every_s:
            self.stream.write(self.line() + "\n")
            self._last_line = now
        else:
            return
        self.stream.flush()

    def close(self) -> None:
        with self._lock:
            self.stream.write(("\r" if self.tty else "") + self.line() + "\n")
            self.stream.flush()


class _NoProgress:
    def add_total(self, n: int) -> None:
        pass

    def advance(self, n: int = 1, *, error: bool = False) -> None:
        pass


_ACTIVE: list[Progress] = []


def active() -> Progress | _NoProgress:
    """The bar of the benchmark now running, or a no-op."""
    return _ACTIVE[-1] if _ACTIVE else _NoProgress()


@contextmanager
def track(name: str, stream: TextIO | None = None, **kw: object) -> Iterator[Progress]:
    """Open `name`'s bar for the duration of its run; the final state is printed as it closes."""
    bar = Progress(name, stream, **kw)  # type: ignore[arg-type]
    _ACTIVE.append(bar)
    try:
        yield bar
    except BaseException:
        _ACTIVE.remove(bar)
        if bar.done:  # what ran before the failure; a run that failed before its first task prints nothing
            bar.close()
        elif bar.tty:
            bar.stream.write("\n")
        raise
    _ACTIVE.remove(bar)
    bar.close()
