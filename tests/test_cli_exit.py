"""`envace` leaves the interpreter's shutdown collections nothing to traverse (`skip_exit_collection`): on a
normal and on an error exit every live object is in the collector's permanent generation when the atexit
handlers run, the handlers still run, and the exit status is the command's."""

from __future__ import annotations

import os
import subprocess
import sys

PROBE = ("import atexit, gc, sys\n"
         "from envace.cli import app\n"
         "atexit.register(lambda: print('frozen', gc.get_freeze_count() > 0, flush=True))\n"
         "app(sys.argv[1:])\n")


def run_probe(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("ENVACE_DEBUG", None)
    return subprocess.run([sys.executable, "-c", PROBE, *args], env=env, capture_output=True, text=True, timeout=300)


def test_a_command_exits_with_its_objects_frozen_and_its_atexit_handlers_run():
    ok = run_probe("data", "--help")
    assert ok.returncode == 0, ok.stderr[-2000:]
    assert ok.stdout.strip().splitlines()[-1] == "frozen True"
    bad = run_probe("tts", "diagnose")  # a missing argument: the one-line error and exit status 2
    assert bad.returncode == 2, bad.stderr[-2000:]
    assert bad.stderr.startswith("error: ")
    assert bad.stdout.strip().splitlines()[-1] == "frozen True"
