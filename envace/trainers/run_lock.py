"""One writer per run folder: `run_lock(out_dir)` holds an exclusive `flock` on `<out_dir>/.envace.lock` for
as long as a training run writes there, and records the holder (pid, host, start time, command) in the file.

A second `envace train` on the same folder is refused with one line naming the holder and the fix, instead
of two processes pruning each other's checkpoints. The kernel drops a `flock` when its process dies,
kill -9 included, so a lock file left behind by a dead run is recognised as stale (the lock is free) and
taken over without asking anyone to delete it. Departure: on network filesystems without `flock`
support the lock degrades to advisory per host; the holder record still names who wrote last.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

LOCK_FILE = ".envace.lock"


class RunFolderBusy(ValueError):
    """Another live process holds the run folder; the message names it and the fix."""


def _holder(path: Path) -> str:
    try:
        info = json.loads(path.read_text())
        since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(info.get("started", 0))))
        return f"pid {info.get('pid')} on {info.get('host')} (since {since}: {info.get('command', '')[:120]})"
    except (OSError, ValueError, TypeError):
        return "another process (its record is unreadable)"


@contextmanager
def run_lock(out_dir: str | Path) -> Iterator[Path]:
    """Hold `out_dir` for this process; RunFolderBusy if a live process holds it already."""
    root = Path(out_dir)
    root.mkdir(parents=True, exist_ok=True)
    path = root / LOCK_FILE
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise RunFolderBusy(f"run folder {root} is in use by {_holder(path)}; wait for that run to end, stop "
                                f"it, or pass another out_dir") from None
        record = {"pid": os.getpid(), "host": socket.gethostname(), "started": time.time(),
                  "command": " ".join(sys.argv)}
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(record).encode(), 0)
        try:
            yield path
        finally:
            os.ftruncate(fd, 0)  # released: an empty record means nobody holds it
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
