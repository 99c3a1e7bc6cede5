"""policy=per_role on verl: the switch composes with verl's real Hydra config (launcher dry run, also through
`envace train --backend verl --dry-run`) and reaches the `envace:` section the trainer reads; launching it is
refused with an error that names the embedded alternative, before any cluster or GPU time is spent (the
Rehearse actor's worker group and replicas are not built yet: docs/gpu.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from envace.config import ConfigError, load_config
from envace.trainers.verl.config import LoopSettings, VerlLaunchConfig
from envace.trainers.verl.launcher import build_overrides, compose_verl_config, launch_verl

pytestmark = pytest.mark.verl
EXAMPLE = Path(__file__).resolve().parents[2] / "configs" / "verl" / "qwen3_8b_cm2.yaml"


@pytest.fixture(scope="module")
def per_role_cfg() -> VerlLaunchConfig:
    return load_config(VerlLaunchConfig, EXAMPLE, ["policy=per_role"])


def test_per_role_composes_into_the_envace_section(per_role_cfg):
    overrides = build_overrides(per_role_cfg)
    assert "+envace.policy=per_role" in overrides
    composed = compose_verl_config(overrides)
    assert LoopSettings.from_verl(composed).policy == "per_role"
    shared = compose_verl_config(build_overrides(per_role_cfg.model_copy(update={"policy": "shared"})))
    assert LoopSettings.from_verl(shared).policy == "shared"


def test_cli_dry_run_composes_and_says_it_is_not_launchable(capsys):
    from envace.trainers.verl.launcher import main

    assert main([str(EXAMPLE), "policy=per_role", "--dry-run", "--show-config"]) == 0
    out = capsys.readouterr().out
    assert "+envace.policy=per_role" in out and "policy: per_role" in out  # the composed verl config
    assert "not launchable on verl yet" in out


def test_launch_is_refused_before_the_cluster(per_role_cfg, tmp_path):
    with pytest.raises(ConfigError, match="configs/train/per_role.yaml"):
        launch_verl(per_role_cfg.model_copy(update={"python": str(tmp_path / "never_run")}),
                    environ={"RAY_ADDRESS": "10.0.0.1:6379"})


def test_trainer_refuses_before_building_worker_groups(verl_api, verl_config_factory, monkeypatch):
    from envace.trainers.verl.trainer import EnvaceTrainer
    from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync

    built = []
    monkeypatch.setattr(PPOTrainerSync, "_setup", lambda self: built.append(self))
    trainer = object.__new__(EnvaceTrainer)
    trainer.config = verl_config_factory(policy="per_role")
    with pytest.raises(ConfigError, match="not launchable"):
        trainer._setup()
    assert built == []
    trainer.config = verl_config_factory()
    trainer._envace_settings = None
    trainer._setup()
    assert built == [trainer]  # shared: verl's own setup runs


def test_loop_and_top_level_policy_must_agree():
    with pytest.raises(ValueError, match="set only the top-level policy"):
        VerlLaunchConfig(model="m", train_files=["x"], loop=LoopSettings(policy="per_role"))
