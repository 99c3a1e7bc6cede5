"""dvc.yaml parses into the intended stage graph with params.yaml, its commands resolve, the first stages
dry-run, and the default remote is the local .dvc-storage. (The full `dvc repro` is run separately.)"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]


def _dvc(args, cwd):
    env = {**os.environ, "DVC_NO_ANALYTICS": "1", "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    return subprocess.run([sys.executable, "-m", "dvc", *args], cwd=cwd, capture_output=True, text=True, env=env,
                          timeout=300)


def test_stage_graph_commands_and_remote(tmp_path):
    for rel in ("dvc.yaml", "params.yaml", "configs/train/envace.yaml", "configs/worldbench/build.yaml", ".dvc/config"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / rel, tmp_path / rel)
    conf = tmp_path / ".dvc" / "config"
    conf.write_text(conf.read_text().replace("[core]\n", "[core]\n    no_scm = True\n", 1))  # no git here
    from dvc.repo import Repo

    params = yaml.safe_load((REPO / "params.yaml").read_text())
    with Repo(str(tmp_path)) as repo:
        assert repo.config["core"]["remote"] == "local"
        assert repo.config["remote"]["local"]["url"].endswith(".dvc-storage")
        stages = {s.name: s for s in repo.index.stages}
        assert set(stages) == {"data", "model", "sft", "rl", "evaluate", "worldbench"}
        worldbench = stages.pop("worldbench")  # its own command, outside the training pipeline
        edges = {(a.name, b.name) for a, b in repo.index.graph.edges}  # (stage, stage it depends on)
    assert edges == {("sft", "data"), ("sft", "model"), ("rl", "sft"), ("rl", "data"),
                     ("evaluate", "rl"), ("evaluate", "data")}
    # every stage runs its envace.pipeline step (the flow's and the demo's step functions) from params.yaml
    assert {n: s.cmd for n, s in stages.items()} == {n: f"python -m envace.pipeline {n}" for n in stages}
    assert {n: [str(p.def_path) for p in s.deps if p.def_path.endswith("params.yaml")] for n, s in stages.items()} \
        == {n: ["params.yaml"] for n in stages}
    assert params["rl"]["config"] in [str(d.def_path) for d in stages["rl"].deps]
    assert [str(o.def_path) for o in stages["rl"].outs] == ["runs/rl/final"]
    assert [str(o.def_path) for o in stages["evaluate"].metrics] == ["runs/eval/eval.json"]
    assert worldbench.cmd == "python -m envace.cli worldbench build configs/worldbench/build.yaml"
    assert [str(o.def_path) for o in worldbench.outs] == [yaml.safe_load(
        (REPO / "configs/worldbench/build.yaml").read_text())["out"]]

    dag = _dvc(["dag"], tmp_path)
    assert dag.returncode == 0, dag.stderr
    dry = _dvc(["repro", "--dry", "data", "model"], tmp_path)
    assert dry.returncode == 0, dry.stderr
    assert "python -m envace.pipeline data" in dry.stdout and "python -m envace.pipeline model" in dry.stdout
