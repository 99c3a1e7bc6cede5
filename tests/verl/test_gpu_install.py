"""The cluster's install file (requirements/gpu-cluster.txt) stays envace's dependency list and its `all` extra
minus the CPU torch pin, with verl's GPU extra, and the runbook installs exactly that file (docs/gpu.md). The
resolver run that proves it resolves is recorded in docs/gpu.md (it downloads GBs of CUDA wheel metadata: not a
unit test)."""

from __future__ import annotations

import tomllib
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = ROOT / "requirements" / "gpu-cluster.txt"


def _reqs(lines) -> dict[str, Requirement]:
    out = {}
    for line in lines:
        line = line.split("#", 1)[0].strip()
        if line:
            r = Requirement(line)
            out[r.name.lower()] = r
    return out


def test_cluster_file_is_pyproject_minus_the_cpu_torch_pin():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    base = _reqs(project["dependencies"] + project["optional-dependencies"]["all"])  # the core and every tier
    cluster = _reqs(CLUSTER.read_text().splitlines())
    assert "torch" in base and "torch" not in cluster  # verl's extra brings its own torch (2.11.0)
    missing = sorted(set(base) - {"torch"} - set(cluster))
    assert not missing, f"add {missing} to {CLUSTER.name} (pyproject.toml gained them)"
    extra = sorted(set(cluster) - set(base))
    assert not extra, f"{CLUSTER.name} lists {extra}, which pyproject.toml does not"
    for name, req in base.items():
        if name == "torch":
            continue
        assert str(cluster[name].specifier) == str(req.specifier), (name, cluster[name], req)
        assert req.extras <= cluster[name].extras, (name, cluster[name].extras, req.extras)
    assert "vllm" in cluster["verl"].extras  # verl's tested GPU pins: vllm 0.24.0, torch 2.11.0


def test_runbook_installs_the_cluster_file_then_envace_without_deps():
    runbook = (ROOT / "docs" / "gpu.md").read_text()
    assert "pip install -r requirements/gpu-cluster.txt" in runbook
    assert "pip install --no-deps -e ." in runbook
    assert "verl[vllm,fsdp]==0.9.1'   #" not in runbook  # the old line that cannot resolve with torch==2.13.0
