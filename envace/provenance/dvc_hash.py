"""Content hashes of data inputs, identical to the md5 DVC 3 records, for MLflow tags.

- a file: the md5 of its bytes (DVC 3's `hash: md5`; DVC 2's dos2unix normalisation is not applied);
- a directory: DVC's tree hash: the md5 of `json.dumps(sorted([{"md5": <file md5>, "relpath": <posix
  relative path>}, ...]), sort_keys=True)` with ".dir" appended. Like DVC it skips `.git`, `.hg` and
  `.dvc` directories; unlike DVC it does not apply `.dvcignore` patterns (a directory that needs them
  should be `dvc add`-ed, then its recorded hash is used).

When the path is DVC-tracked (a `<path>.dvc` file, or an output in a `dvc.lock` of an enclosing
directory) and no file under it is newer than that record, the recorded md5 is returned without reading
the data (large datasets hash once, at `dvc add` time). Otherwise the hash is computed.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable
from pathlib import Path

import yaml

SKIP_DIRS = {".git", ".hg", ".dvc"}
CHUNK = 1 << 20


def file_md5(path: str | Path) -> str:
    h = hashlib.md5()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
    return h.hexdigest()


def _files(root: Path) -> list[Path]:
    out: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS)
        out.extend(Path(dirpath) / f for f in filenames)
    return out


def dir_md5(path: str | Path) -> str:
    root = Path(path)
    entries = [{"md5": file_md5(f), "relpath": f.relative_to(root).as_posix()} for f in _files(root)]
    entries.sort(key=lambda e: e["relpath"])
    return hashlib.md5(json.dumps(entries, sort_keys=True).encode("utf-8")).hexdigest() + ".dir"


def content_hash(path: str | Path) -> str:
    """The hash DVC would compute for `path` now (no shortcut through records)."""
    p = Path(path)
    if p.is_dir():
        return dir_md5(p)
    if p.is_file():
        return file_md5(p)
    raise FileNotFoundError(f"data input {p} does not exist; check the path in the config")


def _newest_mtime(p: Path) -> float:
    if p.is_file():
        return p.stat().st_mtime
    return max([p.stat().st_mtime, *(f.stat().st_mtime for f in _files(p))])


def _out_md5(out: dict) -> str | None:
    value = out.get("md5")
    if not isinstance(value, str):
        return None
    if out.get("hash") != "md5" and not value.endswith(".dir"):
        return None  # a DVC 2 (dos2unix) record: not comparable with a plain md5 of the bytes
    return value


def recorded_hash(path: str | Path) -> tuple[str, Path] | None:
    """(md5, record file) when DVC tracks `path` via `<path>.dvc` or a `dvc.lock` above it."""
    p = Path(path).resolve()
    dvc_file = p.with_name(p.name + ".dvc")
    if dvc_file.is_file():
        data = yaml.safe_load(dvc_file.read_text()) or {}
        for out in data.get("outs") or []:
            if Path(out.get("path", "")).name == p.name and (md5 := _out_md5(out)):
                return md5, dvc_file
    for parent in p.parents:
        lock = parent / "dvc.lock"
        if lock.is_file():
            data = yaml.safe_load(lock.read_text()) or {}
            for stage in (data.get("stages") or {}).values():
                for out in stage.get("outs") or []:
                    if (parent / out.get("path", "")).resolve() == p and (md5 := _out_md5(out)):
                        return md5, lock
        if (parent / ".dvc").is_dir():
            break  # the repository root: no dvc.lock above it belongs to this repo
    return None


def data_hash(path: str | Path) -> str:
    """DVC-compatible md5 of a file or directory (the recorded one when it is provably current)."""
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"data input {p} does not exist; check the path in the config")
    rec = recorded_hash(p)
    if rec is not None and _newest_mtime(p) <= rec[1].stat().st_mtime:
        return rec[0]
    return content_hash(p)


def input_hashes(paths: Iterable[str | Path]) -> dict[str, str]:
    """{path as given: data_hash} for every input path."""
    return {str(p): data_hash(p) for p in paths}
