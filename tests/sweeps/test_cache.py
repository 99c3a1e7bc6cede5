"""Cache keys: stable for the same experiment; changed by the config, the input data or the code."""

from __future__ import annotations

import os
from pathlib import Path

from envace.provenance.dvc_hash import content_hash
from envace.sweeps.cache import cache_key, code_version, input_hash, source_hash
from envace.sweeps.cells import cell_cache_key
from envace.sweeps.grid import CellSpec

REPO = Path(__file__).resolve().parents[2]


def make_model(d: Path, weights: bytes = b"w1") -> Path:
    d.mkdir(parents=True, exist_ok=True)
    (d / "config.json").write_text("{}")
    (d / "model.safetensors").write_bytes(weights)
    return d


def spec(tmp_path, model: Path, **kw) -> CellSpec:
    base = {"name": "seed=0", "group": "all", "seed": 0, "kind": "train",
            "base": str(REPO / "configs/train/envace.yaml"), "overrides": [f"model={model}"],
            "out_dir": str(tmp_path / "cell"), "mlflow_uri": str(tmp_path / "mlf")}
    return CellSpec(**{**base, **kw})


def test_key_is_stable_and_ignores_the_parent_run(tmp_path):
    m = make_model(tmp_path / "m")
    k1 = cell_cache_key(spec(tmp_path, m))
    assert k1 == cell_cache_key(spec(tmp_path, m))
    assert k1 == cell_cache_key(spec(tmp_path, m, parent_run_id="another-parent"))
    assert len(k1) == 64


def test_key_changes_with_config_seed_eval_and_inputs(tmp_path):
    m = make_model(tmp_path / "m")
    k = cell_cache_key(spec(tmp_path, m))
    assert cell_cache_key(spec(tmp_path, m, overrides=[f"model={m}", "steps=7"])) != k
    assert cell_cache_key(spec(tmp_path, m, seed=1)) != k
    assert cell_cache_key(spec(tmp_path, m, eval_overrides=["n_tasks=5"])) != k
    (m / "model.safetensors").write_bytes(b"w2")  # same config, different weights
    os.utime(m / "model.safetensors", ns=(1, 1))
    assert cell_cache_key(spec(tmp_path, m)) != k


def test_key_changes_with_the_code_version(tmp_path):
    from envace.trainers.config import TrainConfig

    m = make_model(tmp_path / "m")
    cfg = TrainConfig(model=str(m))
    assert cache_key("train", cfg, code="abc") != cache_key("train", cfg, code="abd")
    assert cache_key("train", cfg, code="abc") == cache_key("train", cfg, code="abc")


def test_input_hash_is_dvcs_md5_and_follows_edits(tmp_path):
    m = make_model(tmp_path / "m")
    h1 = input_hash(m)
    assert h1 == content_hash(m) and h1.endswith(".dir")
    (m / "config.json").write_text('{"a": 1}')
    assert input_hash(m) == content_hash(m) != h1


def test_source_hash_covers_envace_and_flows_sources(tmp_path):
    (tmp_path / "envace").mkdir()
    (tmp_path / "flows").mkdir()
    (tmp_path / "envace" / "a.py").write_text("x = 1\n")
    h = source_hash(tmp_path)
    (tmp_path / "flows" / "b.py").write_text("y = 2\n")
    h2 = source_hash(tmp_path)
    (tmp_path / "envace" / "a.py").write_text("x = 2\n")
    assert len({h, h2, source_hash(tmp_path)}) == 3
    assert code_version()  # a commit, commit+diff or src-<hash>: never empty


def test_code_version_can_be_pinned(monkeypatch):
    from envace.sweeps.cache import CODE_VERSION_ENV

    detected = code_version()
    monkeypatch.setenv(CODE_VERSION_ENV, "release-1.2")
    assert code_version() == "release-1.2"
    monkeypatch.delenv(CODE_VERSION_ENV)
    assert code_version() == detected


def test_git_code_version_tracks_commits_edits_and_new_modules(tmp_path):
    import subprocess

    from envace.sweeps.cache import working_tree_suffix

    def git(*args):
        subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True)

    (tmp_path / "envace").mkdir()
    (tmp_path / "envace" / "a.py").write_text("x = 1\n")
    git("init", "-q")
    git("add", "envace/a.py")
    git("-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "c1")
    assert working_tree_suffix(tmp_path) == ""  # clean: the commit alone
    (tmp_path / "envace" / "a.py").write_text("x = 2\n")
    edited = working_tree_suffix(tmp_path)
    (tmp_path / "envace" / "b.py").write_text("y = 1\n")  # untracked new module
    with_new = working_tree_suffix(tmp_path)
    (tmp_path / "README.md").write_text("docs\n")  # outside envace/ and flows/: not code
    assert edited.startswith("+") and with_new.startswith("+") and edited != with_new
    assert working_tree_suffix(tmp_path) == with_new
