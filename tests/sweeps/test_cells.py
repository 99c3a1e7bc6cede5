"""Cell plumbing: config resolution, endpoint detection, metric flattening, the execution log."""

from __future__ import annotations

from pathlib import Path

import pytest

from envace.config import ConfigError, load_config
from envace.sweeps.cells import (
    calls_endpoint,
    eval_metrics,
    executions,
    prepare_cell_dir,
    resolve_cell_config,
    run_cell,
    train_metrics,
)
from envace.sweeps.grid import CellSpec
from envace.trainers.config import TrainConfig

REPO = Path(__file__).resolve().parents[2]
VERL_EXAMPLE = sorted((REPO / "configs" / "verl").glob("*.yaml"))[0]  # the shipped verl launch config


def spec(tmp_path, **kw) -> CellSpec:
    base = {"name": "v=a,seed=1", "group": "v=a", "seed": 1, "kind": "train",
            "base": str(REPO / "configs/train/envace.yaml"), "overrides": ["model=/m", "seed=99", "steps=3"],
            "out_dir": str(tmp_path / "cell"), "mlflow_uri": str(tmp_path / "mlf"), "parent_run_id": "PARENT"}
    return CellSpec(**{**base, **kw})


def test_resolve_sets_seed_tracking_and_out_dir(tmp_path):
    cfg = resolve_cell_config(spec(tmp_path))
    assert cfg.seed == 1  # the sweep's seed beats a level's seed=99
    assert cfg.steps == 3 and cfg.model == "/m" and cfg.out_dir == str(tmp_path / "cell")
    assert cfg.tracking.parent_run_id == "PARENT" and cfg.tracking.enabled and not cfg.progress
    assert resolve_cell_config(spec(tmp_path), for_key=True).tracking.parent_run_id is None


def test_calls_endpoint_finds_urls_anywhere_in_the_config():
    from envace.trainers.verl.config import VerlLaunchConfig

    assert not calls_endpoint(load_config(TrainConfig, REPO / "configs/train/envace.yaml"))
    verl = load_config(VerlLaunchConfig, REPO / "configs/verl/qwen3_8b_cm2.yaml")
    assert calls_endpoint(verl)  # its LLM judge is http://judge-host:8000/v1
    assert calls_endpoint({"a": {"b": {"url": "https://x"}}}) and not calls_endpoint({"a": "httpx"})


def test_eval_metrics_keep_numeric_leaves_only():
    result = {"model": "/m", "wall_s": 2.5,
              "world": {"success": 0.5, "reward": 0.25, "success_per_seed": [0.5],
                        "per_domain": {"bank": {"success": 1.0}}, "fidelity": {"pairs": 4, "exact_match": 0.75},
                        "tts": {"n": 2, "mode": "parallel"}, "ok": True},
              "benchmarks": {"report": {"overall": 0.125}}}
    assert eval_metrics(result) == {"eval/world/success": 0.5, "eval/world/reward": 0.25,
                                    "eval/world/per_domain/bank/success": 1.0, "eval/world/fidelity/pairs": 4.0,
                                    "eval/world/fidelity/exact_match": 0.75, "eval/world/tts/n": 2.0,
                                    "eval/report/overall": 0.125, "eval/wall_s": 2.5}


def test_train_metrics_average_the_last_five_logged_steps():
    hist = [{"step": i, "reward/mean": float(i)} for i in range(1, 8)] + [{"step": 8}]
    out = train_metrics(hist, 8)
    assert out == {"train/steps": 8.0, "train/reward_last": (3 + 4 + 5 + 6 + 7) / 5}
    assert train_metrics([], 0) == {"train/steps": 0.0}


def test_a_cell_with_an_invalid_config_raises_and_logs_the_execution(tmp_path):
    bad = spec(tmp_path, overrides=["model=/m", "rollout.mode=simulator"])
    with pytest.raises(ConfigError, match="simulator_model"):
        run_cell(bad)
    events = executions(bad.out_dir)
    assert [e["event"] for e in events] == ["start", "end"] and events[1]["status"] == "error"
    assert executions(tmp_path / "never") == []


def test_checkpoints_of_another_experiment_are_not_resumed(tmp_path):
    d = tmp_path / "cell"
    ckpt = d / "checkpoints" / "step_000002"
    ckpt.mkdir(parents=True)
    assert prepare_cell_dir(d, "k1") is False and ckpt.is_dir()  # first time: nothing to compare with
    assert prepare_cell_dir(d, "k1") is False and ckpt.is_dir()  # same experiment (crash, retry): resume
    assert prepare_cell_dir(d, "k2") is True and not (d / "checkpoints").exists()  # code/data changed
    assert (d / "cell_key").read_text().strip() == "k2"
