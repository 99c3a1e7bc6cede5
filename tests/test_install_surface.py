"""The install surface: the core install (pyproject.toml's dependencies, no extra) runs `envace --help`, the model
and data commands, a tiny embedded training run and `envace eval`; a command of an optional tier stops with one
line that names the missing package and its extra. Nothing is uninstalled: every command runs in a subprocess
whose interpreter refuses the optional packages (a finder first on sys.meta_path, put there by a sitecustomize
module on PYTHONPATH, so the command's own child processes refuse them too). pyproject.toml's extras are held
to the tiers: their names, `all` as the union of the tiers, no optional package in the core, and scripts/setup.sh
installing every tier."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement

from envace.cli_errors import classify
from envace.extras import EXTRAS, MissingExtra, check, install_command, require

ROOT = Path(__file__).resolve().parents[1]
BLOCKED = ("verl", "ray", "prefect", "prefect_ray", "dvc", "streamlit", "plotly", "psycopg")
TIERS = ("cluster", "flows", "dashboard", "postgres")
LINE = re.compile(r"^error: .+ \(.+\): .+$")
SITECUSTOMIZE = f'''"""Refuse envace's optional packages in this interpreter, as if they were not installed."""
import sys

BLOCKED = {BLOCKED!r}


class RefuseOptional:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None


for loaded in [m for m in sys.modules if m.partition(".")[0] in BLOCKED]:  # a .pth file may have imported one
    del sys.modules[loaded]
sys.meta_path.insert(0, RefuseOptional())
'''
PROBE = """
import importlib, importlib.util, json, sys
out = {}
for name in sys.argv[1:]:
    try:
        importlib.import_module(name)
        out[name] = "imported"
    except ModuleNotFoundError as exc:
        out[name] = "refused" if exc.name == name.partition(".")[0] else f"other: {exc}"
print(json.dumps(out))
"""
# Every module of envace imports without the extras, except the verl backend, which says to install `cluster`.
IMPORT_ALL = """
import importlib, json, sys
out = {}
for name in sys.argv[1:]:
    try:
        importlib.import_module(name)
    except Exception as exc:
        out[name] = f"{type(exc).__name__}: {exc}"
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def core_env(tmp_path_factory) -> dict[str, str]:
    """The environment of a core-only interpreter."""
    site = tmp_path_factory.mktemp("core_only")
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "MLFLOW_ENABLE_TELEMETRY": "false",
           "PYTHONPATH": os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH")) if p)}
    env.pop("ENVACE_DEBUG", None)
    return env


def run(env: dict[str, str], *args: str, cwd: Path, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def envace(env: dict[str, str], *args: str, cwd: Path) -> subprocess.CompletedProcess:
    return run(env, "-m", "envace.cli", *args, cwd=cwd)


def ok(res: subprocess.CompletedProcess) -> str:
    assert res.returncode == 0, res.stderr[-3000:]
    return res.stdout


def test_the_core_interpreter_refuses_every_optional_package(core_env, tmp_path):
    names = [*BLOCKED, "prefect.flows", "plotly.graph_objects", "dvc.repo", "sqlalchemy", "mlflow", "fastapi"]
    seen = json.loads(ok(run(core_env, "-c", PROBE, *names, cwd=tmp_path)).strip().splitlines()[-1])
    assert seen == {**{n: "refused" for n in names[:-3]}, "sqlalchemy": "imported", "mlflow": "imported",
                    "fastapi": "imported"}


def test_help_runs_on_the_core(core_env, tmp_path):
    out = ok(envace(core_env, "--help", cwd=tmp_path))
    for command in ("train", "eval", "serve", "model", "data", "sweep", "store", "dashboard"):
        assert re.search(rf"^\W*{command}\s", out, re.M), (command, out)


def test_every_module_imports_on_the_core_but_the_verl_backend_which_names_its_extra(core_env, tmp_path):
    modules = []
    for path in sorted((ROOT / "envace").rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if "migrations" in parts:  # Alembic's scripts run a migration when imported
            continue
        modules.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    failed = json.loads(ok(run(core_env, "-c", IMPORT_ALL, *modules, cwd=tmp_path)).strip().splitlines()[-1])
    backend = {m: e for m, e in failed.items() if m.startswith(("envace.trainers.verl.", "envace.trainers.verl_"))}
    assert failed == backend, "imports an optional package at module level:\n" + "\n".join(
        f"{m}: {e}" for m, e in failed.items() if m not in backend)
    assert backend, "the verl backend imported without verl: is the interpreter refusing it?"
    for module, error in backend.items():
        assert install_command("cluster") in error and "is not installed" in error, (module, error)


# (command, the package it misses first, its extra); each runs in `tmp` unless it names files of the repository
OPTIONAL_COMMANDS = {
    "sweep run": (["sweep", "run", str(ROOT / "configs/sweeps/example_two_cell.yaml")], "prefect", "flows"),
    "sweep schedule": (["sweep", "schedule", str(ROOT / "configs/sweeps/example_two_cell.yaml"), "--cron",
                        "0 3 * * *"], "prefect", "flows"),
    "data add": (["data", "add", "notes.txt", "--repo", ".", "--no-validate"], "dvc", "flows"),
    "dashboard": (["dashboard", "--store", "store.db"], "streamlit", "dashboard"),
    "train --backend verl": (["train", "--backend", "verl", str(ROOT / "configs/verl/qwen3_8b_cm2.yaml"),
                              "--dry-run"], "verl", "cluster"),
    "store upgrade postgresql": (["store", "upgrade", "postgresql://user@127.0.0.1:1/db"], "psycopg", "postgres"),
}


@pytest.mark.parametrize("name", OPTIONAL_COMMANDS)
def test_an_optional_command_on_the_core_is_one_line_naming_its_extra(core_env, tmp_path, name):
    args, package, extra = OPTIONAL_COMMANDS[name]
    (tmp_path / "notes.txt").write_text("a note\n")
    res = envace(core_env, *args, cwd=tmp_path)
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2 and len(lines) == 1, (res.returncode, res.stderr[-3000:])
    assert LINE.match(lines[0]), lines[0]
    assert lines[0].startswith(f"error: {package} is not installed: ") and f"needs the {extra} extra" in lines[0]
    assert lines[0].endswith(f"pip install 'envace[{extra}]'" + (
        " (verl[verl-core]==0.9.1 and ray)" if extra == "cluster" else "")), lines[0]
    assert not list(tmp_path.glob("*.dvc")) and not (tmp_path / ".dvc").exists()  # nothing half-done


@pytest.mark.slow
def test_the_core_builds_trains_and_evaluates_the_tiny_model(core_env, tmp_path):
    model, run_dir, uri = tmp_path / "model", tmp_path / "run", f"sqlite:///{tmp_path / 'mlflow.db'}"
    ok(envace(core_env, "model", "init", "--out", str(model), "--corpus-tasks", "120", "hidden_size=64",
              "num_layers=2", "num_heads=4", "num_kv_heads=2", "head_dim=16", "intermediate_size=128",
              "vocab_size=700", "seed=0", cwd=tmp_path))
    built = json.loads(ok(envace(core_env, "data", "build", "--out", str(tmp_path / "data"), "--n-train", "4",
                                 "--n-val", "2", "--n-test", "2", cwd=tmp_path)))
    assert built and (tmp_path / "data").is_dir()
    train = ok(envace(core_env, "train", f"model={model}", f"out_dir={run_dir}", "steps=2", "save_every=1",
                      "prompts_per_step=2", "k=2", "threads=1", "progress=false", "data.n_tasks=20",
                      "rollout.max_assistant_turns=2", "rollout.act.max_new_tokens=8",
                      "rollout.rehearse.max_new_tokens=8", "shadow_monitor=false", f"tracking.mlflow_uri={uri}",
                      cwd=tmp_path))
    summary = json.loads(train[train.index("{"):])
    assert summary["last_step"] == 2 and summary["mlflow_run_id"]
    assert (run_dir / "checkpoints" / "step_000002" / "policy").is_dir() and (run_dir / "store.db").is_file()
    ok(envace(core_env, "eval", str(run_dir / "checkpoints" / "step_000002"), "--benchmarks", "world", "n_tasks=1",
              "-k", "1", "fidelity=false", "device=cpu", "threads=1", "rollout.max_assistant_turns=1",
              "rollout.act.max_new_tokens=8", f"out_dir={tmp_path / 'eval'}", "tracking.enabled=true",
              f"tracking.mlflow_uri={uri}", f"tracking.store_url={tmp_path / 'eval_store.db'}", cwd=tmp_path))
    assert json.loads((tmp_path / "eval" / "eval.json").read_text())
    # a sweep is previewed on the core; running it needs the flows extra
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(yaml.safe_dump({"name": "core", "kind": "train", "base": str(ROOT / "configs/train/envace.yaml"),
                                     "overrides": [f"model={model}", "steps=1"], "axes": {"variant": {"envace": []}},
                                     "seeds": [0], "out_dir": str(tmp_path / "sw")}))
    assert json.loads(ok(envace(core_env, "sweep", "run", "--dry-run", str(sweep), cwd=tmp_path)))["n_cells"] == 1
    res = envace(core_env, "sweep", "run", str(sweep), cwd=tmp_path)
    assert res.returncode == 2 and res.stderr.strip().splitlines() == [
        "error: prefect is not installed: `envace sweep run` needs the flows extra (envace sweep run): "
        "pip install 'envace[flows]'"]
    assert not (tmp_path / "sw").exists()


def _name(requirement: str) -> str:
    return Requirement(requirement).name.lower().replace("-", "_")


def test_pyproject_extras_are_the_tiers():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    assert set(extras) == {*TIERS, "all", "gpu", "bench", "test"}
    assert sorted(extras["all"]) == sorted({r for tier in TIERS for r in extras[tier]})
    assert set(EXTRAS) == set(TIERS)
    for tier, modules in EXTRAS.items():  # each tier's requirements bring the modules envace.extras names
        assert set(modules) <= {_name(r) for r in extras[tier]}, (tier, modules, extras[tier])
    assert set(BLOCKED) == {m for modules in EXTRAS.values() for m in modules}
    core = {_name(r) for r in project["dependencies"]}
    assert not core & set(BLOCKED), core & set(BLOCKED)
    assert {"torch", "mlflow", "sqlalchemy", "alembic", "fastapi", "uvicorn", "httpx"} <= core


def test_setup_installs_every_tier():
    installs = re.findall(r"pip install -q -e '\.\[([^\]]*)\]'", (ROOT / "scripts" / "setup.sh").read_text())
    assert [set(i.split(",")) for i in installs] == [{"all", "test", "bench"}]


def test_require_names_the_missing_package_and_the_extra(tmp_path, monkeypatch):
    with pytest.raises(MissingExtra) as err:
        require("envace_no_such_package.sub", "flows", "`envace sweep run`")
    assert str(err.value) == ("envace_no_such_package is not installed: `envace sweep run` needs the flows extra: "
                              "pip install 'envace[flows]'")
    (tmp_path / "needs_absent.py").write_text("import envace_absent_dependency\n")
    (tmp_path / "bad_version.py").write_text("raise ImportError('cannot import name X from y')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(MissingExtra) as err:
        require("needs_absent", "dashboard", "`envace dashboard`")
    assert str(err.value) == ("envace_absent_dependency is not installed (needs_absent imports it): `envace dashboard` "
                              "needs the dashboard extra: pip install 'envace[dashboard]'")
    with pytest.raises(MissingExtra, match=r"^bad_version could not be imported \(cannot import name X from y\): "
                                           r"a store needs the postgres extra: pip install 'envace\[postgres\]'$"):
        require("bad_version", "postgres", "a store")
    assert require("json", "flows", "x") is json
    check("json", "flows", "x")
    with pytest.raises(MissingExtra, match=r"^envace_nope is not installed: x needs the cluster extra: ") as err:
        check("envace_nope", "cluster", "x")
    line = classify(err.value, "envace train").line()
    assert line == ("error: envace_nope is not installed: x needs the cluster extra (envace train): "
                    "pip install 'envace[cluster]'")
