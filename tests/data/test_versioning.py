"""`add_dataset`: dvc add through DVC's Python API, in temp repositories (no git and inside git)."""

from __future__ import annotations

import hashlib
import subprocess

import pytest
import yaml

from envace.data.versioning import add_dataset
from envace.provenance.dvc_hash import data_hash


@pytest.fixture(autouse=True)
def _private_dvc_site_cache(tmp_path, monkeypatch):
    """DVC keeps a per-repository index under /var/tmp/dvc; keep the temp repositories' ones in tmp."""
    monkeypatch.setenv("DVC_SITE_CACHE_DIR", str(tmp_path / "dvc-site-cache"))


def test_add_a_file_and_a_directory_without_git(tmp_path):
    f = tmp_path / "cm2.jsonl"
    f.write_bytes(b'{"uuid": "a"}\n{"uuid": "b"}\n')
    v = add_dataset(f, tmp_path, validate=False)  # DVC mechanics only: these rows are not CM2 items
    assert v.md5 == hashlib.md5(f.read_bytes()).hexdigest()
    assert v.dvc_file == tmp_path / "cm2.jsonl.dvc" and v.remote == "local"
    out = yaml.safe_load(v.dvc_file.read_text())["outs"][0]
    assert (out["md5"], out["path"], out["size"]) == (v.md5, "cm2.jsonl", f.stat().st_size)
    # pushed to the local default remote, stored under its md5
    assert (tmp_path / ".dvc-storage" / "files" / "md5" / v.md5[:2] / v.md5[2:]).read_bytes() == f.read_bytes()
    assert "url = ../.dvc-storage" in (tmp_path / ".dvc" / "config").read_text()
    d = tmp_path / "bench"
    (d / "x").mkdir(parents=True)
    (d / "x" / "one.json").write_text("[1]")
    (d / "two.json").write_text("[2]")
    vd = add_dataset(d, tmp_path, push=False, validate=False)
    assert vd.md5.endswith(".dir") and vd.remote is None
    (d / "two.json").touch()  # force a recompute: our digest must equal what DVC recorded
    assert data_hash(d) == vd.md5


def test_inside_a_git_repository_and_errors(tmp_path):
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    f = tmp_path / "data.csv"
    f.write_text("a,b\n1,2\n")
    v = add_dataset(f, tmp_path, push=False, validate=False)
    assert v.md5 == hashlib.md5(f.read_bytes()).hexdigest()
    assert "/data.csv" in (tmp_path / ".gitignore").read_text()  # DVC keeps the data out of git
    other = tmp_path / "other"
    other.mkdir()
    with pytest.raises(ValueError, match="outside the repository"):
        add_dataset(f, other)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        add_dataset(tmp_path / "missing.csv", tmp_path)
