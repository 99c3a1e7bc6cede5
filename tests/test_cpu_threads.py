"""The CPU thread policy (envace.cpu_threads): which thread count and OpenMP variables a process gets under
which conditions, that the wait policy reaches the OpenMP runtime torch loads, and that sweeps running cells
side by side give each its share of the cores. No timing: the speed it buys is bench/contention.py's."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from envace.cpu_threads import (
    JOBS_VAR,
    WAIT_POLICY_VAR,
    ThreadSource,
    apply_thread_policy,
    configure_environment,
    cpu_jobs,
    plan_threads,
    usable_cpus,
)

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("environ, cpus, threads, want", [
    ({}, 2, None, (2, ThreadSource.SHARE)),  # alone: a thread per usable CPU
    ({}, 8, None, (8, ThreadSource.SHARE)),
    ({JOBS_VAR: "2"}, 2, None, (1, ThreadSource.SHARE)),  # two cells side by side on 2 cores: one each
    ({JOBS_VAR: "3"}, 8, None, (2, ThreadSource.SHARE)),  # floor(8 / 3)
    ({JOBS_VAR: "4"}, 2, None, (1, ThreadSource.SHARE)),  # more jobs than cores: still one thread
    ({JOBS_VAR: "2"}, 0, None, (1, ThreadSource.SHARE)),
    ({"OMP_NUM_THREADS": "3", JOBS_VAR: "2"}, 2, None, (3, ThreadSource.ENV)),  # the user's choice wins
    ({"OMP_NUM_THREADS": "4,2"}, 2, None, (4, ThreadSource.ENV)),  # a nesting list: its first level
    ({"OMP_NUM_THREADS": "3"}, 2, 1, (1, ThreadSource.CONFIG)),  # a config's threads field wins over both
    ({JOBS_VAR: "2"}, 2, 2, (2, ThreadSource.CONFIG)),
])
def test_thread_count_rules(environ, cpus, threads, want):
    plan = plan_threads(environ, cpus, threads)
    assert (plan.threads, plan.source) == want


def test_wait_policy_is_set_only_where_the_user_left_it_unset():
    assert plan_threads({}, 2).env == {WAIT_POLICY_VAR: "PASSIVE"}
    assert plan_threads({WAIT_POLICY_VAR: "ACTIVE"}, 2).env == {}
    assert plan_threads({WAIT_POLICY_VAR: "ACTIVE"}, 2, threads=1).env == {}


@pytest.mark.parametrize("var, value", [("OMP_NUM_THREADS", "zero"), ("OMP_NUM_THREADS", "0"), (JOBS_VAR, "-1")])
def test_bad_environment_values_are_named(var, value):
    with pytest.raises(ValueError, match=f"{var}='{value}' in the environment is not a positive integer"):
        plan_threads({var: value}, 2)
    with pytest.raises(ValueError, match="threads=0 must be >= 1"):
        plan_threads({}, 2, threads=0)


def test_configure_environment_keeps_the_users_value(monkeypatch):
    monkeypatch.delenv(WAIT_POLICY_VAR, raising=False)
    assert configure_environment() == {WAIT_POLICY_VAR: "PASSIVE"}
    assert os.environ[WAIT_POLICY_VAR] == "PASSIVE"
    monkeypatch.setenv(WAIT_POLICY_VAR, "ACTIVE")
    assert configure_environment() == {}
    assert os.environ[WAIT_POLICY_VAR] == "ACTIVE"


def test_apply_sets_torch_threads(monkeypatch):
    import torch

    before = torch.get_num_threads()
    monkeypatch.setenv(WAIT_POLICY_VAR, "PASSIVE")  # already set: no late-policy warning in this test process
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv(JOBS_VAR, raising=False)
    try:
        assert apply_thread_policy(1).threads == 1 and torch.get_num_threads() == 1
        plan = apply_thread_policy()
        assert plan.source is ThreadSource.SHARE and torch.get_num_threads() == usable_cpus() == plan.threads
        monkeypatch.setenv(JOBS_VAR, str(2 * usable_cpus()))
        assert apply_thread_policy().threads == 1 and torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


def test_a_wait_policy_set_after_torch_loaded_warns(monkeypatch):
    import torch  # noqa: F401 - loaded, so the runtime has read its environment already

    monkeypatch.delenv(WAIT_POLICY_VAR, raising=False)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    with pytest.warns(RuntimeWarning, match="set after torch was imported"):
        apply_thread_policy()


def _spin_count(code: str, **env: str) -> str:
    """GOMP_SPINCOUNT as the OpenMP runtime that torch loads reports it (OMP_DISPLAY_ENV=VERBOSE)."""
    full = {k: v for k, v in os.environ.items() if k not in (WAIT_POLICY_VAR, "GOMP_SPINCOUNT")}
    full.update(OMP_DISPLAY_ENV="VERBOSE", OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT), **env)
    out = subprocess.run([sys.executable, "-c", code + "\nimport torch\ntorch.zeros(1)"], env=full,
                         capture_output=True, text=True, timeout=300, check=True).stderr
    return next(line.split("=")[1].strip(" '") for line in out.splitlines() if "GOMP_SPINCOUNT" in line)


def test_the_envace_command_and_flows_make_openmp_threads_sleep_instead_of_spinning():
    # torch alone: libgomp's default busy-wait; imported after the envace command or the flows: no spinning
    assert _spin_count("pass") == "300000"
    assert _spin_count("import envace.cli") == "0"
    assert _spin_count("import envace_flows") == "0"
    assert _spin_count("import envace.cli", OMP_WAIT_POLICY="ACTIVE") != "0"  # the user's setting stands


def test_cpu_jobs_sets_the_share_for_children_and_restores(monkeypatch):
    monkeypatch.delenv(JOBS_VAR, raising=False)
    with cpu_jobs(2):
        assert os.environ[JOBS_VAR] == "2"
        child = subprocess.run([sys.executable, "-c", f"import os; print(os.environ['{JOBS_VAR}'])"],
                               capture_output=True, text=True, check=True).stdout.strip()
        assert child == "2"
    assert JOBS_VAR not in os.environ
    monkeypatch.setenv(JOBS_VAR, "5")
    with cpu_jobs(2):
        assert os.environ[JOBS_VAR] == "2"
    assert os.environ[JOBS_VAR] == "5"
    with cpu_jobs(None):
        assert os.environ[JOBS_VAR] == "5"


def test_sweeps_count_their_side_by_side_cell_processes():
    from envace.sweeps.grid import SweepConfig
    from envace_flows.common import cell_processes

    def cfg(**kw):
        return SweepConfig.model_validate({"name": "s", "out_dir": "unused", **kw})

    assert cell_processes(cfg(max_workers=2)) == 2  # auto: processes
    assert cell_processes(cfg(max_workers=1)) is None  # in this process
    assert cell_processes(cfg(max_workers=3, task_runner="threads")) is None
    assert cell_processes(cfg(max_workers=1, task_runner="processes")) == 1
    assert cell_processes(cfg(max_workers=2, runner={"kind": "ray"})) is None
