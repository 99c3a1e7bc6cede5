"""`envace data add` validates CM2 JSON / verl parquet with the training loaders before DVC sees the file:
bad files give one `error:` line naming the file/row/field, exit status 2, and leave no .dvc file and no
pushed copy. Also: the local DVC storage is git-ignored, 100k-deep JSON is a classified data error, and
data files written through a temporary file get the umask's mode (0644 under 022), not mkstemp's 0600."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from envace.data import DataError, load_cm2, write_cm2
from envace.data.verl_parquet import write_verl_parquet
from envace.data.versioning import STORAGE_DIR, add_dataset
from envace.worlds import generate_tasks


@pytest.fixture(autouse=True)
def _private_dvc_site_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("DVC_SITE_CACHE_DIR", str(tmp_path / "dvc-site-cache"))


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "DVC_SITE_CACHE_DIR": str(cwd / "dvc-site-cache"), "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "envace.cli", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)


def _nothing_versioned(repo: Path, data: Path) -> None:
    assert not data.with_name(data.name + ".dvc").exists()
    storage = repo / STORAGE_DIR
    assert not storage.exists() or not any(p.is_file() for p in storage.rglob("*"))


BAD_FILES = {
    # name: (bytes, fragment the error line must contain)
    "empty.json": (b"", "is empty"),
    "truncated.json": (b'[{"uuid": "a", "messages": [', "is not valid JSON at line 1 column 29"),
    "no_messages.json": (json.dumps([{"uuid": "a", "tools": [], "checklists": []}]).encode(), "field 'messages'"),
    "garbage.json": (bytes(range(256)) * 4000, "cannot be read"),
    "empty_array.json": (b"[]", "holds no rows"),
    "table.csv": (b"a,b\n1,2\n", "not .json, .jsonl or .parquet"),
}


@pytest.mark.parametrize("name", sorted(BAD_FILES))
def test_bad_files_are_refused_before_anything_is_written(tmp_path, name):
    content, fragment = BAD_FILES[name]
    f = tmp_path / name
    f.write_bytes(content)
    with pytest.raises(DataError, match=fragment.replace("(", r"\(")):
        add_dataset(f, tmp_path)
    _nothing_versioned(tmp_path, f)
    assert not (tmp_path / ".dvc").exists()  # the DVC repository is not even initialised


def test_cli_error_is_one_line_naming_file_row_and_field(tmp_path):
    good = generate_tasks(2, "train", 0)
    f = tmp_path / "cm2.json"
    write_cm2(good, f)
    rows = json.loads(f.read_text())
    del rows[1]["messages"]
    f.write_text(json.dumps(rows))
    res = _cli("data", "add", str(f), "--repo", str(tmp_path), cwd=tmp_path)
    assert res.returncode == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), res.stderr
    assert f"{f}: row 1, field 'messages'" in lines[0] and "Traceback" not in res.stderr
    _nothing_versioned(tmp_path, f)


def test_deep_json_is_a_data_error_not_a_recursion_error(tmp_path):
    f = tmp_path / "deep.json"
    f.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(DataError, match="nests values too deeply"):
        load_cm2(f)
    g = tmp_path / "deep.jsonl"
    g.write_text('{"a": ' * 100_000 + "1" + "}" * 100_000 + "\n")
    with pytest.raises(DataError, match=r"row 0 \(line 1\): field '<row>': nests values too deeply"):
        load_cm2(g)
    res = _cli("data", "add", str(f), "--repo", str(tmp_path), cwd=tmp_path)
    assert res.returncode == 2 and res.stderr.count("\n") == 1 and "nests values too deeply" in res.stderr
    _nothing_versioned(tmp_path, f)


def test_valid_cm2_and_parquet_are_versioned_and_storage_is_git_ignored(tmp_path):
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    tasks = generate_tasks(3, "train", 1)
    d = tmp_path / "data"
    write_cm2(tasks, d / "train.json")
    write_verl_parquet(tasks, d / "train.parquet")
    v = add_dataset(d, tmp_path)
    assert v.md5.endswith(".dir") and v.remote == "local"
    assert any((tmp_path / STORAGE_DIR).rglob("*"))  # pushed
    assert f"/{STORAGE_DIR}/" in (tmp_path / ".gitignore").read_text().splitlines()
    status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=tmp_path,
                            capture_output=True, text=True, check=True).stdout
    assert STORAGE_DIR not in status
    # a parquet file that is not parquet
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(b"PAR1 not really")
    stored = sorted((tmp_path / STORAGE_DIR).rglob("*"))
    with pytest.raises(DataError, match="is not a readable parquet file"):
        add_dataset(bad, tmp_path)
    assert not (tmp_path / "bad.parquet.dvc").exists() and sorted((tmp_path / STORAGE_DIR).rglob("*")) == stored


def test_storage_ignore_entry_for_a_subdirectory_repo(tmp_path):
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    sub = tmp_path / "proj"
    write_cm2(generate_tasks(1, "train", 2), sub / "one.json")
    add_dataset(sub / "one.json", sub)
    assert f"/proj/{STORAGE_DIR}/" in (tmp_path / ".gitignore").read_text().splitlines()


@pytest.mark.parametrize("mask", [0o022, 0o027])
def test_written_data_files_follow_the_umask(tmp_path, mask):
    old = os.umask(mask)
    try:
        tasks = generate_tasks(1, "train", 0)
        cm2 = write_cm2(tasks, tmp_path / "a.json")
        pq = write_verl_parquet(tasks, tmp_path / "a.parquet")
    finally:
        os.umask(old)
    want = 0o666 & ~mask  # what open(path, "w") gives: 0644 / 0640
    assert oct(os.stat(cm2).st_mode & 0o777) == oct(want)
    assert oct(os.stat(pq).st_mode & 0o777) == oct(want)
