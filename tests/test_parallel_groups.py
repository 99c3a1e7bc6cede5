"""The parallel suite's groups hold: tests that tests/conftest.py puts in one xdist group run in one worker.

A temporary test directory whose conftest marks six tests with one `xdist_group` the way tests/conftest.py
does (its `pytest_collection_modifyitems`, tryfirst), run by pytest-xdist with `-n 2 --dist loadgroup`; each
test records the worker that ran it. Without working groups the load scheduler spreads six tests over both
workers. This fails, for one, under pytest 9 with pytest-xdist 3.8, whose group suffix pytest 9 ignores.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CONFTEST = textwrap.dedent('''
    import pytest

    @pytest.hookimpl(tryfirst=True)
    def pytest_collection_modifyitems(config, items):
        for item in items:
            if "grouped" in item.name:
                item.add_marker(pytest.mark.xdist_group("together"))
''')

TESTS = textwrap.dedent('''
    import os
    import time

    import pytest

    @pytest.mark.parametrize("n", range(6))
    def test_grouped(n, tmp_path_factory):
        time.sleep(0.2)
        (tmp_path_factory.getbasetemp().parent / f"grouped-{n}").write_text(os.environ["PYTEST_XDIST_WORKER"])

    @pytest.mark.parametrize("n", range(6))
    def test_free(n):
        time.sleep(0.2)
''')


def test_a_group_runs_in_one_worker(tmp_path):
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_probe.py").write_text(TESTS)
    base = tmp_path / "base"
    res = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "2", "--dist", "loadgroup", "-p",
                          "no:cacheprovider", f"--basetemp={base}", str(tmp_path / "test_probe.py")],
                         cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    ran = [p.read_text() for p in base.glob("grouped-*")]  # each worker's basetemp is a folder of `base`
    assert len(ran) == 6 and len(set(ran)) == 1, ran


def test_the_longest_work_units_go_out_first():
    """tests/conftest.py hands out the units of minutes first (verl's end-to-end cases, then the Prefect/Ray
    group), whatever the order of collection: the load scheduler sends units in that order."""
    files = ["tests/test_flatten.py", "tests/flows/test_sweep_ray.py", "tests/verl/test_verl_cpu_e2e.py"]
    res = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *files],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    order = [line.split("::")[0] for line in res.stdout.splitlines() if "::" in line]
    firsts = sorted(files, key=order.index)
    assert firsts == files[::-1], firsts
    assert order == sorted(order, key=firsts.index)  # each file's tests stay together
