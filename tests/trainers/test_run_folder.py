"""A run folder has one writer and keeps its ground: a second `train` on a held folder is refused naming the
holder, a lock left by a killed run is taken over; a checkpoint write on a full or read-only disk says so
and where, and leaves no temporary folder; a kill -9 during the final checkpoint's MLflow upload resumes
to a complete registered model; a copied run folder starts its own MLflow run; a resumed sweep cell's
summary is MLflow's. Real MLflow on SQLite and the real embedded trainer on a tiny model throughout."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from mlflow.tracking import MlflowClient

from envace.models.loading import load_policy
from envace.trainers import checkpoint as ckpt_mod
from envace.trainers.checkpoint import CheckpointWriteError, save_checkpoint
from envace.trainers.run_lock import LOCK_FILE, RunFolderBusy, run_lock

ROOT = Path(__file__).resolve().parents[2]


def _cfg(model, out_dir, mlflow_db, steps=2, **extra):
    from envace.trainers.config import TrainConfig

    return TrainConfig.model_validate({
        "model": str(model), "out_dir": str(out_dir), "steps": steps, "save_every": 1, "keep_checkpoints": 3,
        "prompts_per_step": 1, "k": 2, "threads": 1, "progress": False, "data": {"n_tasks": 10},
        "tracking": {"mlflow_uri": f"sqlite:///{mlflow_db}", "registered_model": "envace-test-model"},
        "rollout": {"max_assistant_turns": 1, "act": {"max_new_tokens": 8}, "rehearse": {"max_new_tokens": 8}},
        **extra})


def _holder_process(out_dir: Path) -> subprocess.Popen:
    code = f"from envace.trainers.run_lock import run_lock\nwith run_lock({str(out_dir)!r}):\n    print('held', " \
           "flush=True)\n    input()\n"
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                            cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_a_second_writer_is_refused_naming_the_holder_and_a_killed_holders_lock_is_stale(tiny_model_dir, tmp_path):
    from envace.trainers.embedded import train

    out = tmp_path / "run"
    holder = _holder_process(out)
    try:
        with pytest.raises(RunFolderBusy) as err:
            train(_cfg(tiny_model_dir, out, tmp_path / "mlflow.db"))
        msg = str(err.value)
        assert f"pid {holder.pid}" in msg and str(out) in msg and "pass another out_dir" in msg and "\n" not in msg
        assert not (out / "checkpoints").exists() and not (out / "config.yaml").exists()  # refused before writing
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    assert json.loads((out / LOCK_FILE).read_text())["pid"] == holder.pid  # the dead holder's record is left ...
    with run_lock(out):  # ... and recognised as stale: the kernel dropped the lock with the process
        assert json.loads((out / LOCK_FILE).read_text())["pid"] == os.getpid()
    assert (out / LOCK_FILE).read_text() == ""  # released on exit


@pytest.fixture
def saved(tiny_model_dir):
    model, tok = load_policy(tiny_model_dir)
    return model, tok, torch.optim.AdamW(model.parameters(), lr=1e-3)


@pytest.mark.parametrize(("error", "free", "says"), [
    (OSError(errno.ENOSPC, "No space left on device"), 1 << 40, "no space left on device"),
    # torch's zip writer on a full disk: an opaque RuntimeError; the free space tells
    (RuntimeError("[enforce fail at inline_container.cc:672] . PytorchStreamWriter failed writing file data/0: "
                  "file write failed"), 0, "no space left on device"),
    (OSError(errno.EROFS, "Read-only file system"), 1 << 40, "the filesystem is read-only"),
    (PermissionError(errno.EACCES, "Permission denied"), 1 << 40, "permission denied"),
])
def test_a_failed_checkpoint_write_says_what_and_where_and_removes_its_temporary_folder(
        saved, tmp_path, monkeypatch, error, free, says):
    model, tok, opt = saved
    root = tmp_path / "checkpoints"
    save_checkpoint(root, 1, {"policy": model}, tok, {"policy": opt}, {})

    def fail(obj, path, *a, **k):
        if isinstance(error, OSError):
            error.filename = str(path)
        Path(path).write_bytes(b"partial")  # something was written before the disk filled
        raise error

    monkeypatch.setattr(ckpt_mod.torch, "save", fail)
    monkeypatch.setattr(ckpt_mod, "free_bytes", lambda path: free)
    with pytest.raises(CheckpointWriteError) as err:
        save_checkpoint(root, 2, {"policy": model}, tok, {"policy": opt}, {})
    msg = str(err.value)
    assert says in msg and "step_000002" in msg and str(root) in msg and "\n" not in msg
    assert sorted(p.name for p in root.iterdir()) == ["step_000001"]  # no .tmp_step_* left, old one intact
    from envace.cli_errors import classify

    assert says in classify(err.value, "envace train").what


def test_kill_during_the_final_checkpoint_upload_then_resume_leaves_the_registered_model_complete(
        tiny_model_dir, tmp_path):
    from envace.trainers.embedded import train

    out, db = tmp_path / "run", tmp_path / "mlflow.db"
    cfg = _cfg(tiny_model_dir, out, db)
    # the run in a subprocess: its upload of the final checkpoint copies two files and then the process is
    # killed (os._exit: no finally, no atexit, as with kill -9)
    script = textwrap.dedent(f"""
        import os
        from mlflow.tracking import MlflowClient
        from envace.trainers.config import TrainConfig
        from envace.trainers.embedded import train

        real = MlflowClient.log_artifacts
        def log_artifacts(self, run_id, local_dir, artifact_path=None):
            if not local_dir.endswith("step_000002"):
                return real(self, run_id, local_dir, artifact_path)
            for name in sorted(os.listdir(local_dir))[:2]:
                p = os.path.join(local_dir, name)
                if os.path.isfile(p):
                    self.log_artifact(run_id, p, artifact_path)
            os._exit(137)
        MlflowClient.log_artifacts = log_artifacts
        train(TrainConfig.model_validate_json({cfg.model_dump_json()!r}))
    """)
    res = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                         capture_output=True, text=True, timeout=900)
    assert res.returncode == 137, res.stderr[-2000:]
    client = MlflowClient(f"sqlite:///{db}")
    assert client.search_model_versions("name='envace-test-model'") == []  # the kill left no version
    again = train(cfg)  # resume: the final checkpoint exists, nothing left to train
    assert again.history == []
    [version] = client.search_model_versions("name='envace-test-model'")
    assert version.tags["envace.checkpoint.step"] == "2" and version.run_id == again.mlflow_run_id
    step_dir = out / "checkpoints" / "step_000002"
    want = sorted(p.relative_to(step_dir).as_posix() for p in step_dir.rglob("*") if p.is_file())
    local = Path(client.download_artifacts(version.run_id, "checkpoints/step_000002", str(tmp_path / "dl")))
    got = sorted(p.relative_to(local).as_posix() for p in local.rglob("*") if p.is_file())
    assert got == want
    assert client.get_run(again.mlflow_run_id).info.status == "FINISHED"
    train(cfg)  # a complete checkpoint is not logged or registered twice
    assert len(client.search_model_versions("name='envace-test-model'")) == 1


def test_a_copied_run_folder_starts_its_own_mlflow_run(tiny_model_dir, tmp_path):
    import shutil

    from envace.trainers.embedded import train

    db = tmp_path / "mlflow.db"
    first = train(_cfg(tiny_model_dir, tmp_path / "a", db, steps=1))
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    client = MlflowClient(f"sqlite:///{db}")
    parent_points = len(client.get_metric_history(first.mlflow_run_id, "reward/mean"))
    client.update_run(first.mlflow_run_id, status="RUNNING")  # the parent is still training in its own folder
    with pytest.warns(UserWarning, match="a copy"):
        copy = train(_cfg(tiny_model_dir, tmp_path / "b", db, steps=2))
    assert copy.mlflow_run_id != first.mlflow_run_id
    run = client.get_run(copy.mlflow_run_id)
    assert run.data.tags["envace.copied_from"] == first.mlflow_run_id
    assert [m.step for m in client.get_metric_history(copy.mlflow_run_id, "reward/mean")] == [2]  # not dropped
    assert len(client.get_metric_history(first.mlflow_run_id, "reward/mean")) == parent_points  # parent untouched
    assert client.get_run(first.mlflow_run_id).info.status == "RUNNING"  # the copy did not end the parent's run


def test_a_resumed_sweep_cells_summary_is_the_one_mlflow_holds(tiny_model_dir, tmp_path):
    from envace.sweeps.cells import logged_history, train_metrics
    from envace.trainers.embedded import train

    db, out = tmp_path / "mlflow.db", tmp_path / "cell"
    train(_cfg(tiny_model_dir, out, db, steps=3))
    shutil_rm = __import__("shutil").rmtree
    shutil_rm(out / "checkpoints" / "step_000003")  # killed after step 3 logged, before its checkpoint
    res = train(_cfg(tiny_model_dir, out, db, steps=3))
    assert [h["step"] for h in res.history] == [3]  # the resumed process saw only the re-run step
    points = MlflowClient(f"sqlite:///{db}").get_metric_history(res.mlflow_run_id, "reward/mean")
    mlflow_mean = sum(m.value for m in points) / len(points)
    assert sorted(m.step for m in points) == [1, 2, 3]
    summary = train_metrics(logged_history(f"sqlite:///{db}", res.mlflow_run_id) or res.history, res.last_step)
    assert summary["train/reward_last"] == pytest.approx(mlflow_mean)
