"""The README's main job in its one-minute form: `envace demo --quick` runs every stage (world, tiny
model, SFT, EnvACE RL, GRPO baseline, evaluation, TTS sweep) and leaves MLflow runs and stored
trajectories behind."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import sqlalchemy as sa


@pytest.mark.timeout(1800)
def test_quick_demo_runs_every_stage(tmp_path):
    out = tmp_path / "demo"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "MLFLOW_ENABLE_TELEMETRY": "false"}
    done = subprocess.run([sys.executable, "-m", "envace.cli", "demo", "--quick", "--out", str(out)],
                          env=env, capture_output=True, text=True, timeout=1700)
    assert done.returncode == 0, done.stderr[-3000:]
    for stage in ("1/7", "3/7", "4/7 RL: envace", "5/7 RL: grpo_env", "6/7", "7/7"):
        assert stage in done.stdout
    summary = json.loads((out / "summary.json").read_text())
    assert {"sft", "eval_sft", "envace", "eval_envace", "grpo_env", "eval_grpo_env", "tts"} <= set(summary)
    assert [(r["n"], r["mode"]) for r in summary["tts"]] == [(0, "parallel"), (2, "parallel"), (2, "sequential")]
    assert "MLflow UI" in done.stdout and "envace dashboard" in done.stdout
    assert "RL effect" in done.stdout
    for name in ("envace", "grpo_env"):  # paired change vs SFT = difference of the two evaluations' means
        for mode in ("greedy", "t1"):
            d = summary[f"delta_{name}"][mode]["reward"]
            assert d["diff"] == pytest.approx(
                summary[f"eval_{name}"][mode]["reward"] - summary["eval_sft"][mode]["reward"])
            assert d["boot_lo"] <= d["diff"] <= d["boot_hi"]
    eng = sa.create_engine(f"sqlite:///{out / 'store.db'}")
    with eng.connect() as c:
        runs = c.execute(sa.text("SELECT name, kind, status FROM runs")).all()
        per_eval = dict(c.execute(sa.text("SELECT r.name, count(*) FROM trajectories t JOIN runs r ON r.id = t.run_id "
                                          "WHERE r.kind = 'eval' GROUP BY r.name")).all())
    assert sorted(r.name for r in runs if r.kind == "train") == ["envace", "grpo_env"]  # one store run per RL method
    # the demo's own evaluations are stored too: one run per (checkpoint content, temperature), finished.
    # Checkpoints with identical weights share their runs (in the quick run both RL methods may see only
    # zero advantages, so weight decay alone moves them, identically); quick: 6 test tasks, greedy = seed 0
    # plus its rehearse-mode fidelity pass, T=1 = seed 0
    from envace.provenance.dvc_hash import content_hash

    models = [out / "sft" / "model", *(out / "envace" / "checkpoints").glob("step_*/policy"),
              *(out / "grpo_env" / "checkpoints").glob("step_*/policy")]
    evals = {r.name: r.status for r in runs if r.kind == "eval"}
    assert set(evals) <= {f"demo-{m}-{t}" for m in ("sft", "envace", "grpo_env") for t in ("greedy", "t1")}
    assert set(evals.values()) == {"finished"} and len(evals) == 2 * len({content_hash(p) for p in models})
    assert per_eval == {name: 12 if name.endswith("greedy") else 6 for name in evals}
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{out / 'mlflow.db'}")
    exp = client.get_experiment_by_name("envace-demo")
    runs = client.search_runs([exp.experiment_id])
    parents = [r for r in runs if r.info.run_name == "demo"]
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parents[0].info.run_id]
    assert len(parents) == 1 and len(children) == 2


@pytest.mark.timeout(1800)
def test_quick_demo_one_arm_after_the_other(tmp_path):
    """`side_by_side=False` (and any machine with one usable CPU): no side process; the baseline's lane runs
    first in the demo's own process, then EnvACE's, and the summary holds every stage's results."""
    out = tmp_path / "demo"
    code = ("import sys; from envace.demo import quick_config, run_demo; "
            "cfg = quick_config(sys.argv[1]).model_copy(update={'side_by_side': False}); "
            "run_demo(sys.argv[1], cfg=cfg)")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "MLFLOW_ENABLE_TELEMETRY": "false"}
    done = subprocess.run([sys.executable, "-c", code, str(out)], env=env, capture_output=True, text=True,
                          timeout=1700)
    assert done.returncode == 0, done.stderr[-3000:]
    stages = ["3/7", "5/7 RL: grpo_env", "4/7 RL: envace", "6/7", "7/7"]
    assert [done.stdout.index(s) for s in stages] == sorted(done.stdout.index(s) for s in stages)
    summary = json.loads((out / "summary.json").read_text())
    assert {"eval_sft", "eval_envace", "eval_grpo_env", "delta_envace", "delta_grpo_env", "tts"} <= set(summary)
