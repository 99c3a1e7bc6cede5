"""DVC-compatible hashes: files are plain md5; directories follow DVC's tree digest, checked against
`dvc add` itself in tests/data/test_versioning.py and against a hand-built listing here."""

from __future__ import annotations

import hashlib
import json
import os
import time

import pytest
import yaml

from envace.provenance.dvc_hash import content_hash, data_hash, dir_md5, input_hashes


def md5(b: bytes) -> str:
    return hashlib.md5(b).hexdigest()


def test_file_and_directory_hashes(tmp_path):
    (tmp_path / "d" / "sub").mkdir(parents=True)
    (tmp_path / "d" / "b.txt").write_bytes(b"bee\r\n")
    (tmp_path / "d" / "sub" / "a.txt").write_bytes(b"a")
    (tmp_path / "d" / ".git").mkdir()
    (tmp_path / "d" / ".git" / "HEAD").write_bytes(b"skipped like DVC does")
    listing = [{"md5": md5(b"bee\r\n"), "relpath": "b.txt"}, {"md5": md5(b"a"), "relpath": "sub/a.txt"}]
    want = md5(json.dumps(listing, sort_keys=True).encode()) + ".dir"
    assert dir_md5(tmp_path / "d") == want == data_hash(tmp_path / "d")
    assert data_hash(tmp_path / "d" / "b.txt") == md5(b"bee\r\n")  # no dos2unix (DVC 3)
    assert input_hashes([tmp_path / "d" / "sub" / "a.txt"]) == {str(tmp_path / "d" / "sub" / "a.txt"): md5(b"a")}
    with pytest.raises(FileNotFoundError, match="check the path"):
        data_hash(tmp_path / "nope")


def test_a_current_dvc_record_is_trusted_and_a_stale_one_is_not(tmp_path):
    data = tmp_path / "big.bin"
    data.write_bytes(b"payload")
    record = tmp_path / "big.bin.dvc"
    # a record whose md5 we can tell apart from the content hash
    record.write_text(yaml.safe_dump({"outs": [{"md5": "0" * 32, "size": 7, "hash": "md5", "path": "big.bin"}]}))
    past = time.time() - 100
    os.utime(data, (past, past))
    assert data_hash(data) == "0" * 32  # data not newer than its record: the recorded md5, no read
    data.write_bytes(b"changed")  # now newer than the record
    assert data_hash(data) == md5(b"changed") == content_hash(data)


def test_dvc_lock_outputs_are_found(tmp_path):
    (tmp_path / ".dvc").mkdir()
    out = tmp_path / "data" / "tasks.parquet"
    out.parent.mkdir()
    out.write_bytes(b"rows")
    past = time.time() - 100
    os.utime(out, (past, past))
    lock = {"schema": "2.0", "stages": {"world": {"cmd": "x", "outs": [
        {"path": "data/tasks.parquet", "hash": "md5", "md5": "f" * 32, "size": 4}]}}}
    (tmp_path / "dvc.lock").write_text(yaml.safe_dump(lock))
    assert data_hash(out) == "f" * 32
