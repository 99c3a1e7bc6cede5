"""The names envace installs under: the repository's flows/ and dashboard/ folders install as `envace_flows` and
`envace_dashboard` (pyproject.toml's package-dir), never as the generic top-level `flows` and `dashboard` that
any other project may own. pyproject.toml lists its packages by hand (packages.find would name a package after
its folder): the list is held to the folders on disk, the installed distribution to the three names, and every
import the project writes to the installed names."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from importlib.metadata import distribution
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SETUPTOOLS = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
APPS = {"envace_flows": "flows", "envace_dashboard": "dashboard"}  # install name -> folder
FOLDER_NAMES = tuple(APPS.values())
# an import of a folder name, in code or in a command a page shows
BARE_IMPORT = re.compile(r"\b(?:from\s+(?:flows|dashboard)(?:\.\w+)*\s+import\b"
                         r"|import\s+(?:flows|dashboard)\b(?![/\w]))")
SCANNED = ("envace", "flows", "dashboard", "tests", "bench", "scripts", "docs", "configs", ".ci")


def packages_on_disk(root: Path = ROOT) -> set[str]:
    """Every folder of envace/, flows/ and dashboard/ holding a .py file, named as it installs."""
    found = set()
    for name, folder in {"envace": "envace", **APPS}.items():
        base = root / folder
        for d in [base, *sorted(p for p in base.rglob("*") if p.is_dir())]:
            if "__pycache__" not in d.parts and any(d.glob("*.py")):
                found.add(".".join([name, *d.relative_to(base).parts]))
    return found


def test_the_package_list_is_the_folders_on_disk():
    listed, disk = set(SETUPTOOLS["packages"]), packages_on_disk()
    assert not disk - listed, (f"packages missing from pyproject.toml's [tool.setuptools] packages: "
                               f"{sorted(disk - listed)}; add them there")
    assert not listed - disk, (f"pyproject.toml's [tool.setuptools] packages names folders that do not exist: "
                               f"{sorted(listed - disk)}; remove or rename them there")
    assert len(SETUPTOOLS["packages"]) == len(listed), "a package is listed twice in pyproject.toml"


def test_the_apps_install_under_envace_names():
    assert SETUPTOOLS["package-dir"] == APPS
    assert set(distribution("envace").read_text("top_level.txt").split()) == {"envace", *APPS}


PROBE = """
import importlib, importlib.util, json, sys
out = {}
for name in sys.argv[1:]:
    spec = importlib.util.find_spec(name)
    try:
        importlib.import_module(name)
        out[name] = spec.origin
    except ModuleNotFoundError as exc:
        out[name] = f"missing: {exc.name}"
print(json.dumps(out))
"""


def test_outside_the_repository_only_the_envace_names_import(tmp_path):
    # the repository root is not on sys.path here (cwd elsewhere, no PYTHONPATH): what resolves is what the
    # installed distribution provides
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run([sys.executable, "-c", PROBE, *APPS, *FOLDER_NAMES], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    assert seen == {"envace_flows": str(ROOT / "flows" / "__init__.py"),
                    "envace_dashboard": str(ROOT / "dashboard" / "__init__.py"),
                    "flows": "missing: flows", "dashboard": "missing: dashboard"}


def bare_imports(text: str) -> list[int]:
    """Line numbers of the imports of a folder name (`flows`, `dashboard`) in `text`."""
    return [no for no, line in enumerate(text.splitlines(), 1) if BARE_IMPORT.search(line)]


def test_nothing_imports_the_folder_names():
    # with the repository root on sys.path (pytest, `python -m`) `flows` would still resolve, to a second copy
    # of the modules beside envace_flows: every import, command and example uses the installed names
    files = [p for d in SCANNED for p in sorted((ROOT / d).rglob("*"))
             if p.suffix in (".py", ".md", ".yaml", ".yml", ".sh", ".toml") and "__pycache__" not in p.parts]
    files += [ROOT / "README.md", ROOT / "prefect.yaml", ROOT / "dvc.yaml"]
    bad = [f"{p.relative_to(ROOT)}:{no}" for p in files for no in bare_imports(p.read_text(encoding="utf-8"))]
    assert not bad, "imports of `flows` / `dashboard` (use envace_flows / envace_dashboard):\n" + "\n".join(bad)


def test_a_bare_import_is_caught():
    name = "flows"  # built here, so this file holds no such import itself
    text = (f"from {name}.sweep import run\nimport {name}\n  python -c \"from {name} import x\"\n"
            f"import {name}, os\nfrom envace_{name}.sweep import run\n{name}/sweep.py\nimport {name}_extra\n")
    assert bare_imports(text) == [1, 2, 3, 4]
    assert bare_imports("the dashboard imports the store; see dashboard/app.py\n") == []
