"""The git state of the code that runs: commit sha and whether the work tree has uncommitted changes.

Works anywhere: outside a git repository, without a `git` binary, or in a repository with no commit
yet, the commit is "unknown" (and `dirty` is None when it cannot be known). Untracked files do not make a
tree dirty (they are usually outputs); modified or staged tracked files do.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

UNKNOWN = "unknown"


@dataclass(frozen=True)
class GitInfo:
    commit: str
    dirty: bool | None
    branch: str | None = None

    def tags(self) -> dict[str, str]:
        """MLflow tags (the `mlflow.source.git.commit` key is the one MLflow's UI shows)."""
        out = {"git.commit": self.commit, "git.dirty": str(self.dirty).lower() if self.dirty is not None else UNKNOWN}
        if self.commit != UNKNOWN:
            out["mlflow.source.git.commit"] = self.commit
        if self.branch:
            out["git.branch"] = self.branch
        return out


def run_git(cwd: Path, *args: str) -> str | None:
    try:
        res = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return res.stdout.strip() if res.returncode == 0 else None


def git_info(path: str | Path = ".") -> GitInfo:
    """Commit, dirty flag and branch of the repository containing `path`."""
    cwd = Path(path).resolve()
    if cwd.is_file():
        cwd = cwd.parent
    if not cwd.is_dir() or run_git(cwd, "rev-parse", "--is-inside-work-tree") != "true":
        return GitInfo(UNKNOWN, None)
    commit = run_git(cwd, "rev-parse", "--verify", "-q", "HEAD") or UNKNOWN
    status = run_git(cwd, "status", "--porcelain", "--untracked-files=no")
    branch = run_git(cwd, "symbolic-ref", "--short", "-q", "HEAD")
    return GitInfo(commit, None if status is None else bool(status), branch or None)


def git_commit(path: str | Path = ".") -> str:
    return git_info(path).commit
