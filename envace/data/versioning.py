"""Version a dataset with DVC (`envace data add PATH`): `dvc add` through DVC's Python API.

The repository is initialised on first use (`dvc init`; `--no-scm` when the directory is not in a git
work tree, `--subdir` when it is inside one but not at its top). When no default remote is configured,
a local one named `local` is added at `<repo>/.dvc-storage` (written relative to `.dvc/`, so the
repository can move) and the data is pushed there, so `dvc pull` restores it. The returned md5 is what
the caller logs to MLflow (it equals `envace.provenance.dvc_hash.data_hash(path)`). In a git work tree the
local storage folder is added to the repository's `.gitignore` (it holds content-addressed copies, not
sources).

Data sets are validated first, with the loaders training uses (`load_cm2` for `.json` / `.jsonl`,
`read_verl_parquet` for `.parquet`; every such file of a directory): a bad file raises `DataError`
naming the file, row and field before anything is hashed, recorded or pushed. Other file types are
refused unless `validate=False` (`envace data add --no-validate`). DVC comes with the flows extra; without it
`add_dataset` validates, then stops with a line that names the extra.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from envace.data.errors import DataError, Problem
from envace.provenance.gitinfo import run_git

DEFAULT_REMOTE = "local"
STORAGE_DIR = ".dvc-storage"
CM2_SUFFIXES = (".json", ".jsonl")
PARQUET_SUFFIXES = (".parquet",)


@dataclass(frozen=True)
class DatasetVersion:
    path: Path  # the dataset, absolute
    md5: str  # DVC's md5 (".dir" suffix for a directory)
    dvc_file: Path  # the .dvc file that records it (commit it to git)
    remote: str | None  # where it was pushed, None when not pushed


def _open_repo(root: Path):  # -> dvc.repo.Repo
    os.environ.setdefault("DVC_NO_ANALYTICS", "1")
    from envace.extras import require

    Repo = require("dvc.repo", "flows", "dataset versioning (`envace data add`)").Repo

    if not (root / ".dvc").is_dir():
        top = run_git(root, "rev-parse", "--show-toplevel")
        if top is None:
            Repo.init(str(root), no_scm=True)
        else:
            Repo.init(str(root), subdir=Path(top).resolve() != root)
    return Repo(str(root))


def validate_dataset(target: Path) -> int:
    """Read every CM2 / verl-parquet file at `target` (a file or a directory) with the training loaders;
    returns the number of tasks. Raises DataError for a bad file, an unknown file type or no tasks."""
    from envace.data.cm2 import load_cm2
    from envace.data.verl_parquet import read_verl_parquet

    files = [target] if target.is_file() else sorted(
        p for p in target.rglob("*") if p.is_file() and p.suffix.lower() in CM2_SUFFIXES + PARQUET_SUFFIXES)
    if not files:
        raise DataError([Problem(str(target), None, "<dir>", "holds no .json, .jsonl or .parquet data files",
                                 "add CM2 JSON or verl parquet files (or pass --no-validate)")])
    n = 0
    for f in files:
        suffix = f.suffix.lower()
        if suffix in CM2_SUFFIXES:
            tasks = load_cm2(f)
        elif suffix in PARQUET_SUFFIXES:
            tasks = read_verl_parquet(f)
        else:
            raise DataError([Problem(str(f), None, "<file>", f"has suffix {f.suffix!r}, not .json, .jsonl or .parquet",
                                     "pass a CM2 JSON / verl parquet file (or --no-validate for other files)")])
        if not tasks:
            raise DataError([Problem(str(f), None, "<file>", "holds no rows",
                                     "write at least one CM2 item / verl row")])
        n += len(tasks)
    return n


def _ignore_storage(root: Path) -> None:
    """Add the local DVC storage folder to the git work tree's .gitignore (once)."""
    top = run_git(root, "rev-parse", "--show-toplevel")
    if top is None:
        return
    top_path = Path(top).resolve()
    entry = "/" + (root / STORAGE_DIR).relative_to(top_path).as_posix() + "/"
    ignore = top_path / ".gitignore"
    lines = ignore.read_text().splitlines() if ignore.is_file() else []
    if entry not in lines and entry.rstrip("/") not in lines:
        text = ignore.read_text() if ignore.is_file() else ""
        sep = "" if not text or text.endswith("\n") else "\n"
        ignore.write_text(f"{text}{sep}{entry}\n")


def _ensure_remote(repo, root: Path) -> str:  # noqa: ANN001
    current = repo.config["core"].get("remote")
    if current:
        return current
    _ignore_storage(root)
    with repo.config.edit("repo") as conf:
        # DVC reads a relative path here as relative to the cwd and stores it relative to .dvc/ (an
        # absolute path would be stored as is, tying the repository to this machine)
        conf["remote"][DEFAULT_REMOTE] = {"url": os.path.relpath(root / STORAGE_DIR, Path.cwd())}
        conf["core"]["remote"] = DEFAULT_REMOTE
    return DEFAULT_REMOTE


def add_dataset(path: str | Path, repo_root: str | Path = ".", *, push: bool = True,
                validate: bool = True) -> DatasetVersion:
    """Validate (see the module docstring), then `dvc add` a file or directory inside `repo_root`;
    returns its md5 and .dvc file."""
    root = Path(repo_root).resolve()
    target = Path(path).resolve()
    if not target.exists():
        raise FileNotFoundError(2, "dataset does not exist; pass a file or directory to version", str(path))
    if not root.is_dir():
        raise NotADirectoryError(2, "repository root is not a directory; pass --repo <an existing directory>",
                                 str(repo_root))
    if root != target and root not in target.parents:
        raise ValueError(f"dataset {target} is outside the repository {root}; DVC tracks files inside the "
                         f"repository: copy it under {root} or pass --repo <a directory above it>")
    if target == root or target.name in (".dvc", ".git"):
        raise ValueError(f"cannot version {target}: pick a data file or directory inside the repository")
    if validate:
        validate_dataset(target)
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
