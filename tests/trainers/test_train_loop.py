"""The embedded training loop end to end: no real environment in rehearse mode, tracking, and resume
after SIGKILL at the right step with every finished step's trajectories stored exactly once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import sqlalchemy as sa

from envace.trainers.config import TrainConfig
from envace.trainers.embedded import train


def _cfg(model_dir, out_dir, **kw):
    base = dict(model=str(model_dir), out_dir=str(out_dir), steps=2, prompts_per_step=2, k=2, save_every=1,
                threads=1, progress=False, data={"n_tasks": 20},
                rollout={"max_assistant_turns": 2, "act": {"max_new_tokens": 16}, "rehearse": {"max_new_tokens": 16}})
    for key, value in kw.items():
        if isinstance(value, dict):
            base[key] = {**base.get(key, {}), **value}
        else:
            base[key] = value
    return TrainConfig.model_validate(base)


def test_rehearse_training_never_touches_a_real_environment(tiny_model_dir, tmp_path, monkeypatch):
    import envace.worlds.environment as world_env

    def forbidden(*a, **k):
        raise AssertionError("a real environment was created during rehearse-mode training")

    monkeypatch.setattr(world_env.WorldEnvironment, "__init__", forbidden)
    # the exploitation monitor replays calls in a real world after the rollout (tests/trainers/test_shadow.py)
    res = train(_cfg(tiny_model_dir, tmp_path / "run", tracking={"enabled": False}, shadow_monitor=False))
    assert res.last_step == 2
    assert [h["env_calls"] for h in res.history] == [0.0, 0.0]
    assert all(math_ok(h["loss"]) for h in res.history if "loss" in h)


def math_ok(x: float) -> bool:
    return x == x and abs(x) != float("inf")


def test_env_mode_executes_calls_in_the_world(tiny_model_dir, tmp_path, monkeypatch):
    """Standard GRPO: every observation comes from the real environment (never from Rehearse)."""
    res = train(_cfg(tiny_model_dir, tmp_path / "run", rollout={"mode": "env"}, tracking={"enabled": False}))
    assert res.last_step == 2
    assert all(h["rehearse/rows"] == 0 for h in res.history)


def test_rehearse_mode_with_env_state_reward_is_rejected(tiny_model_dir, tmp_path):
    with pytest.raises(ValueError, match="reward='env_state'.*rehearse"):
        _cfg(tiny_model_dir, tmp_path, reward="env_state")


def _store_keys(db: Path) -> list[tuple]:
    eng = sa.create_engine(f"sqlite:///{db}")
    with eng.connect() as c:
        tables = sa.inspect(eng).get_table_names()
        table = next(t for t in tables if "traj" in t)
        rows = c.execute(sa.text(f"SELECT step, prompt_index, sample_index FROM {table}")).fetchall()
    return [tuple(r) for r in rows]


@pytest.mark.slow
def test_sigkill_then_resume_continues_at_the_right_step(tiny_model_dir, tmp_path):
    out = tmp_path / "run"
    mlflow_uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    args = [sys.executable, "-m", "envace.cli", "train", f"model={tiny_model_dir}", f"out_dir={out}", "steps=6",
            "save_every=2", "prompts_per_step=2", "k=2", "threads=1", "progress=false", "data.n_tasks=20",
            "rollout.max_assistant_turns=2", "rollout.act.max_new_tokens=16", "rollout.rehearse.max_new_tokens=16",
            f"tracking.mlflow_uri={mlflow_uri}"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "MLFLOW_ENABLE_TELEMETRY": "false"}
    proc = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    ckpt2 = out / "checkpoints" / "step_000002"
    deadline = time.time() + 600
    while not ckpt2.exists() and time.time() < deadline and proc.poll() is None:
        time.sleep(0.2)
    assert ckpt2.exists(), "no checkpoint before the deadline"
    os.killpg(proc.pid, signal.SIGKILL)  # mid-training: somewhere in step 3 or 4
    proc.wait()
    killed_at = max(int(p.name.split("_")[1]) for p in (out / "checkpoints").glob("step_*"))
    assert killed_at < 6
    done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    summary = json.loads(done.stdout[done.stdout.index("{"):])
    assert summary["last_step"] == 6
    meta = json.loads((out / "checkpoints" / "step_000006" / "meta.json").read_text())
    assert meta["step"] == 6
    # every trajectory of every finished step exactly once: 6 steps x 2 prompts x 2 samples
    keys = _store_keys(out / "store.db")
    assert sorted(keys) == sorted({(s, p, k) for s in range(1, 7) for p in range(2) for k in range(2)})
    # MLflow: the same run continued, one value per step
    from mlflow.tracking import MlflowClient

    client = MlflowClient(mlflow_uri)
    hist = client.get_metric_history(summary["mlflow_run_id"], "reward/mean")
    assert sorted(m.step for m in hist) == [1, 2, 3, 4, 5, 6]
