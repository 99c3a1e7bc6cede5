"""Version a dataset with DVC (`envace data add PATH`): `dvc add` through DVC's Python API.

The repository is initialised on first use (`dvc init`; `--no-scm` when the directory is not in a git
work tree, `--subdir` when it is inside one but not at its top). When no default remote is configured,
a local one named `local` is added at `<repo>/.dvc-storage` (written relative to `.dvc/`, so the
repository can move) and the data is pushed there, so `dvc pull` restores it. The returned md5 is what
the caller logs to MLflow (it equals `envace.tracking.dvc_hash.data_hash(path)`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from envace.tracking.gitinfo import run_git

DEFAULT_REMOTE = "local"
STORAGE_DIR = ".dvc-storage"


@dataclass(frozen=True)
class DatasetVersion:
    path: Path  # the dataset, absolute
    md5: str  # DVC's md5 (".dir" suffix for a directory)
    dvc_file: Path  # the .dvc file that records it (commit it to git)
    remote: str | None  # where it was pushed, None when not pushed


def _open_repo(root: Path):  # -> dvc.repo.Repo
    os.environ.setdefault("DVC_NO_ANALYTICS", "1")
    from dvc.repo import Repo

    if not (root / ".dvc").is_dir():
        top = run_git(root, "rev-parse", "--show-toplevel")
        if top is None:
            Repo.init(str(root), no_scm=True)
        else:
            Repo.init(str(root), subdir=Path(top).resolve() != root)
    return Repo(str(root))


def _ensure_remote(repo, root: Path) -> str:  # noqa: ANN001
    current = repo.config["core"].get("remote")
    if current:
        return current
    with repo.config.edit("repo") as conf:
        # DVC reads a relative path here as relative to the cwd and stores it relative to .dvc/ (an
        # absolute path would be stored as is, tying the repository to this machine)
        conf["remote"][DEFAULT_REMOTE] = {"url": os.path.relpath(root / STORAGE_DIR, Path.cwd())}
        conf["core"]["remote"] = DEFAULT_REMOTE
    return DEFAULT_REMOTE


def add_dataset(path: str | Path, repo_root: str | Path = ".", *, push: bool = True) -> DatasetVersion:
    """`dvc add` a file or directory inside `repo_root`; returns its md5 and .dvc file."""
    root = Path(repo_root).resolve()
    target = Path(path).resolve()
    if not target.exists():
        raise FileNotFoundError(f"dataset {path} does not exist; pass a file or directory to version")
    if not root.is_dir():
        raise NotADirectoryError(f"repository root {repo_root} is not a directory")
    if root != target and root not in target.parents:
        raise ValueError(f"dataset {target} is outside the repository {root}; DVC tracks files inside the "
                         f"repository: copy it under {root} or pass repo_root=<a directory above it>")
    if target == root or target.name in (".dvc", ".git"):
        raise ValueError(f"cannot version {target}: pick a data file or directory inside the repository")
    repo = _open_repo(root)
    try:
        remote = _ensure_remote(repo, root)
        stage = repo.add(str(target))[0]
        out = stage.outs[0]
        md5 = out.hash_info.value
        if not md5:
            raise RuntimeError(f"dvc add {target} recorded no hash; check {stage.path}")
        if push:
            repo.push(targets=[stage.path])
        return DatasetVersion(target, md5, Path(stage.path), remote if push else None)
    finally:
        repo.close()
