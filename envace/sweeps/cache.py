"""Cache keys of sweep cells: a cell is "the same experiment" when its resolved config, the content of
its inputs and the code are the same.

key = sha256 of {cell kind, `BaseConfig.digest()` of the resolved cell config (without the sweep's
parent run id), the evaluation overrides, the DVC md5 of every input (model dirs, data file, simulator
model), the code version}. The code version is the git commit, plus a hash of the uncommitted changes
under envace/ and flows/ (diff of tracked files, bytes of untracked .py files); outside git, or before
the first commit, it is a hash of the envace and flows sources. Editing the code invalidates the cache.
It is computed once per process: a long-running `serve` process runs the code it imported, whatever
the work tree holds later.
`ENVACE_CODE_VERSION=<label>` pins it (an installed package without its git history, or a sweep whose
finished cells should stay valid across edits known not to matter).

Input hashes are memoised on (path, size and mtime of every file under it), so a sweep of 24 cells over
one model directory reads the directory once.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import threading
from pathlib import Path

from envace.config import BaseConfig
from envace.provenance.dvc_hash import data_hash
from envace.provenance.gitinfo import UNKNOWN, git_info, run_git

_PACKAGES = ("envace", "flows")
CODE_VERSION_ENV = "ENVACE_CODE_VERSION"
_memo: dict[tuple[str, tuple], str] = {}
_memo_lock = threading.Lock()


def _source_root() -> Path:
    import envace

    return Path(envace.__file__).resolve().parent.parent


def source_hash(root: Path | None = None) -> str:
    """sha256 over the .py files of the envace and flows packages (relative path + bytes)."""
    root = root or _source_root()
    h = hashlib.sha256()
    for pkg in _PACKAGES:
        base = root / pkg
        if not base.is_dir():
            continue
        for f in sorted(base.rglob("*.py")):
            h.update(f.relative_to(root).as_posix().encode())
            h.update(b"\0")
            h.update(f.read_bytes())
            h.update(b"\0")
    return h.hexdigest()[:16]


def code_version() -> str:
    """'<commit>' for a clean tree, '<commit>+<changes hash>' for a modified one, 'src-<hash>' without git,
    or the value of ENVACE_CODE_VERSION."""
    return os.environ.get(CODE_VERSION_ENV) or detected_code_version()


@functools.lru_cache(maxsize=1)
def detected_code_version() -> str:
    root = _source_root()
    info = git_info(root)
    if info.commit == UNKNOWN:
        return f"src-{source_hash(root)}"
    return info.commit + working_tree_suffix(root)


def working_tree_suffix(root: Path) -> str:
    """'' when envace/ and flows/ match the commit, else '+<hash>' of the diff of tracked files and the
    bytes of untracked .py files there (a new module counts as much as an edited one)."""
    diff = run_git(root, "diff", "HEAD", "--", *_PACKAGES) or ""
    untracked = (run_git(root, "ls-files", "--others", "--exclude-standard", "--", *_PACKAGES) or "").split()
    untracked = sorted(f for f in untracked if f.endswith(".py"))
    if not diff and not untracked:
        return ""
    h = hashlib.sha256(diff.encode())
    for rel in untracked:
        h.update(rel.encode() + b"\0" + (root / rel).read_bytes() + b"\0")
    return "+" + h.hexdigest()[:12]


def _signature(p: Path) -> tuple:
    if p.is_file():
        st = p.stat()
        return ((p.name, st.st_size, st.st_mtime_ns),)
    out = []
    for dirpath, dirnames, filenames in os.walk(p):
        dirnames[:] = sorted(d for d in dirnames if d not in (".git", ".dvc", ".hg"))
        for f in sorted(filenames):
            st = (Path(dirpath) / f).stat()
            out.append((os.path.relpath(Path(dirpath) / f, p), st.st_size, st.st_mtime_ns))
    return tuple(out)


def input_hash(path: str | Path) -> str:
    """`data_hash(path)` memoised on the files' sizes and mtimes."""
    p = Path(path).resolve()
    if not p.exists():
        raise FileNotFoundError(f"input {path} does not exist; check the model / data path of the cell")
    key = (str(p), _signature(p))
    with _memo_lock:
        if key in _memo:
            return _memo[key]
    value = data_hash(p)
    with _memo_lock:
        _memo[key] = value
    return value


def config_inputs(cfg: BaseConfig) -> list[str]:
    """The paths a train / eval config reads: model dir, data file, simulator model (a local simulator slot's
    dir too; an endpoint simulator is named in the config digest, its weights are not here to hash)."""
    paths = [getattr(cfg, "model", None)]
    data = getattr(cfg, "data", None)
    paths.append(getattr(data, "path", None))
    rollout = getattr(cfg, "rollout", None)
    paths.append(getattr(rollout, "simulator_model", None))
    paths.append(getattr(getattr(cfg, "simulator", None), "model_dir", None))
    return [str(p) for p in paths if p]


def cache_key(kind: str, cfg: BaseConfig, extra: object = None, code: str | None = None) -> str:
    """Key of a resolved config: digest + input hashes + code version (+ any JSON-able extra)."""
    payload = {
        "kind": kind,
        "config": cfg.digest(),
        "inputs": {p: input_hash(p) for p in config_inputs(cfg)},
        "code": code if code is not None else code_version(),
        "extra": extra,
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()
