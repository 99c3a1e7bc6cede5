"""The side process: a job runs in the child and its result comes back; the child imports before the job
(and between jobs when asked) and takes its share of the cores; a failed job, a failed import, a dead
child and a job left running are errors or a clean stop in the parent, never a hang."""

from __future__ import annotations

import os
import sys
import time

import pytest

from envace.cpu_threads import JOBS_VAR
from envace.side_process import SideProcess


def describe(x: int) -> dict:
    import torch

    return {"pid": os.getpid(), "double": 2 * x, "jobs": os.environ.get(JOBS_VAR),
            "threads": torch.get_num_threads(), "imported": "json.tool" in sys.modules}


def fail(message: str) -> None:
    raise ValueError(message)


def die(code: int) -> None:
    os._exit(code)


def sleep(seconds: float) -> None:
    time.sleep(seconds)


@pytest.fixture(scope="module")
def side():
    with SideProcess(jobs=2, modules=["json.tool"]) as proc:
        yield proc


def test_a_job_runs_in_the_child_with_its_share_of_the_cores(side, monkeypatch):
    monkeypatch.delenv(JOBS_VAR, raising=False)
    side.submit(describe, 21)
    got = side.result()
    assert got["pid"] != os.getpid() and got["double"] == 42
    assert got["jobs"] == "2" and got["imported"]
    assert got["threads"] == max(1, len(os.sched_getaffinity(0)) // 2)
    assert os.environ.get(JOBS_VAR) is None  # the parent's environment is left as it was


def test_a_failed_job_is_raised_in_the_parent_and_the_child_serves_on(side):
    side.submit(fail, "bad row 7")
    with pytest.raises(RuntimeError, match=r"job failed: ValueError: bad row 7"):
        side.result()
    side.submit(describe, 1)
    assert side.result()["double"] == 2


def test_one_job_at_a_time(side):
    with pytest.raises(RuntimeError, match="no job was submitted"):
        side.result()
    side.submit(describe, 2)
    with pytest.raises(RuntimeError, match="still running a job"):
        side.submit(describe, 3)
    assert side.result()["double"] == 4


def imported(name: str) -> bool:
    return name in sys.modules


def test_preload_imports_between_jobs_and_a_failed_import_is_the_next_jobs_error(side):
    side.submit(imported, "email.mime.text")
    assert side.result() is False
    side.preload(["email.mime.text"])
    side.submit(imported, "email.mime.text")
    assert side.result() is True
    side.preload(["envace_no_such_module"])
    side.submit(describe, 5)
    with pytest.raises(RuntimeError, match=r"importing envace_no_such_module failed: ModuleNotFoundError"):
        side.result()
    side.submit(describe, 5)  # the child serves on
    assert side.result()["double"] == 10


def test_a_child_that_dies_is_an_error_with_its_exit_code():
    with SideProcess(jobs=2) as proc:
        proc.submit(die, 3)
        with pytest.raises(RuntimeError, match=r"exit code 3\) without an answer"):
            proc.result()


def test_close_ends_a_child_still_running_its_job():
    proc = SideProcess(jobs=2)
    proc.submit(sleep, 600)
    t = time.monotonic()
    proc.close()
    assert time.monotonic() - t < 30
    assert not proc._proc.is_alive()
