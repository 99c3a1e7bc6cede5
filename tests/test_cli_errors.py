"""Every `envace` error is one line `error: <what> (<file/field>): <fix>` with exit status 2, and names
CLI commands / options rather than Python functions; `--debug` shows the traceback. The real CLI runs in
a subprocess for each case."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from envace.config import load_config
from envace.evaluation.config import EvalConfig
from envace.trainers.config import TrainConfig

LINE = re.compile(r"^error: .+ \(.+\): .+$")
PYTHON_NAMES = ("init_tiny_model", "import_smollm2", "repo_root=", "save_pretrained", "Traceback",
                "TrainConfig", "EvalConfig")


def envace(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "DVC_SITE_CACHE_DIR": str(cwd / "dvc-site-cache")}
    env.pop("ENVACE_DEBUG", None)
    return subprocess.run([sys.executable, "-m", "envace.cli", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=600)


def one_line_error(res: subprocess.CompletedProcess) -> str:
    """The single stderr line of a failed command (asserting the contract)."""
    assert res.returncode == 2, (res.returncode, res.stderr[-3000:])
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr[-3000:]
    assert LINE.match(lines[0]), lines[0]
    for name in PYTHON_NAMES:
        assert name not in lines[0], lines[0]
    return lines[0]


def test_model_error(tmp_path):
    line = one_line_error(envace("train", f"model={tmp_path / 'nope'}", f"out_dir={tmp_path / 'run'}",
                                 cwd=tmp_path))
    assert f"({tmp_path / 'nope'})" in line and "is not a directory" in line
    assert "`envace model init --out DIR`" in line and "`envace model import-smollm2" in line


def test_interpolation_error(tmp_path):
    line = one_line_error(envace("train", "model=${nosuch}", cwd=tmp_path))
    assert "(model)" in line and "'nosuch' not found" in line and "model=<value>" in line


def test_benchmark_name_error(tmp_path):
    line = one_line_error(envace("eval", str(tmp_path), "--benchmarks", "world,nosuch", cwd=tmp_path))
    assert "(--benchmarks)" in line and "'nosuch'" in line and "--benchmarks" in line.split("): ")[1]


def test_data_error_comes_before_the_model_is_loaded(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"uuid": "a", "tools": []}\n')
    # the model path is wrong too: the data (cheap to check) must be reported, not the model
    line = one_line_error(envace("train", f"model={tmp_path / 'nope'}", "data.source=cm2", f"data.path={bad}",
                                 f"out_dir={tmp_path / 'run'}", cwd=tmp_path))
    assert f"({bad}: row 0, field 'messages')" in line
    assert "data.path=" in line


def test_database_errors_mask_the_password(tmp_path):
    url = "postgresql://user:PASSWORD@127.0.0.1:1/db"  # nothing listens on port 1
    res = envace("store", "upgrade", url, cwd=tmp_path)
    line = one_line_error(res)
    assert "PASSWORD" not in res.stderr + res.stdout
    assert "cannot use the database: OperationalError" in line and "(STORE argument)" in line
    line = one_line_error(envace("store", "upgrade", "nosuchdb://x/y", cwd=tmp_path))
    assert "cannot use the database" in line


def test_database_error_during_train(tmp_path, tiny_dir):
    res = envace("train", f"model={tiny_dir}", "steps=1", f"out_dir={tmp_path / 'run'}",
                 "tracking.store_url=postgresql://user:PASSWORD@127.0.0.1:1/db", cwd=tmp_path)
    line = one_line_error(res)  # also: no "Exception ignored" noise from open runs at exit
    assert "(tracking.store_url)" in line and "tracking.store_url=sqlite:///" in line
    assert "PASSWORD" not in res.stderr + res.stdout


def test_store_upgrade_exists(tmp_path):
    db = tmp_path / "store.db"
    res = envace("store", "upgrade", str(db), cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["revision"] and db.is_file()


def test_override_hint_example_is_accepted(tmp_path):
    line = one_line_error(envace("train", "model=m", "steps", cwd=tmp_path))
    example = re.search(r"e\.g\. (\S+=[^\s;]+)", line).group(1)
    assert load_config(TrainConfig, None, ["model=m", example])  # the hint's own example is valid
    line = one_line_error(envace("eval", str(tmp_path), "n_tasks", cwd=tmp_path))
    example = re.search(r"e\.g\. (\S+=[^\s;]+)", line).group(1)
    assert load_config(EvalConfig, None, [example], model="m")


def test_config_and_usage_errors(tmp_path):
    line = one_line_error(envace("train", "model=m", "steps=abc", cwd=tmp_path))
    assert "(steps)" in line and "steps=<a valid value>" in line
    line = one_line_error(envace("train", "model=m", "nosuchkey=1", cwd=tmp_path))
    assert "(nosuchkey)" in line
    line = one_line_error(envace("train", "--bogus", cwd=tmp_path))
    assert "--bogus" in line and "`envace train --help`" in line


def test_data_add_outside_the_repo_names_the_option(tmp_path):
    f = tmp_path / "a.json"
    f.write_text("[]")
    other = tmp_path / "other"
    other.mkdir()
    line = one_line_error(envace("data", "add", str(f), "--repo", str(other), cwd=tmp_path))
    assert "outside the repository" in line and "--repo" in line
    line = one_line_error(envace("data", "add", str(tmp_path / "missing.json"), cwd=tmp_path))
    assert f"({tmp_path / 'missing.json'})" in line and "does not exist" in line


def test_debug_shows_the_traceback(tmp_path):
    res = envace("--debug", "train", "model=${nosuch}", cwd=tmp_path)
    assert res.returncode == 2 and "Traceback (most recent call last)" in res.stderr
    assert res.stderr.strip().splitlines()[-1].startswith("error: ")
