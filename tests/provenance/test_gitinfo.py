"""Git commit and dirty flag, inside and outside a repository."""

from __future__ import annotations

import subprocess

from envace.provenance.gitinfo import UNKNOWN, git_info


def git(cwd, *args):
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=cwd, check=True,
                          capture_output=True, text=True).stdout.strip()


def test_commit_and_dirty_flag(tmp_path):
    git(tmp_path, "init", "-q", "-b", "main")
    assert git_info(tmp_path).commit == UNKNOWN  # no commit yet
    (tmp_path / "a.py").write_text("x = 1\n")
    git(tmp_path, "add", "a.py")
    git(tmp_path, "commit", "-q", "-m", "first")
    sha = git(tmp_path, "rev-parse", "HEAD")
    info = git_info(tmp_path / "a.py")
    assert (info.commit, info.dirty, info.branch) == (sha, False, "main")
    (tmp_path / "untracked.txt").write_text("out")
    assert git_info(tmp_path).dirty is False
    (tmp_path / "a.py").write_text("x = 2\n")
    info = git_info(tmp_path)
    assert info.dirty is True
    assert info.tags() == {"git.commit": sha, "git.dirty": "true", "mlflow.source.git.commit": sha,
                           "git.branch": "main"}


def test_outside_a_repository(tmp_path):
    info = git_info(tmp_path)
    assert (info.commit, info.dirty) == (UNKNOWN, None)
    assert info.tags() == {"git.commit": UNKNOWN, "git.dirty": UNKNOWN}
    assert git_info(tmp_path / "missing").commit == UNKNOWN
