"""The launcher's Hydra overrides against verl's real `ppo_trainer` config (composed with Hydra's compose
API and validated with verl's own `validate_config`), the dry-run output, and the launch itself (with
a stand-in executable that records what it was started with: main_ppo needs a GPU Ray cluster)."""

from __future__ import annotations

import json
import shlex
import stat
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from envace.config import ConfigError, load_config
from envace.trainers.verl.config import LoopSettings, VerlLaunchConfig
from envace.trainers.verl.launcher import (
    AGENT_LOOPS_YAML,
    PLUGIN_MODULE,
    REWARD_FILE,
    build_overrides,
    compose_verl_config,
    hydra_value,
    launch_verl,
    main,
)

pytestmark = pytest.mark.verl

EXAMPLE = Path(__file__).resolve().parents[2] / "configs" / "verl" / "qwen3_8b_cm2.yaml"


@pytest.fixture(scope="module")
def example_cfg() -> VerlLaunchConfig:
    return load_config(VerlLaunchConfig, EXAMPLE)


@pytest.fixture(scope="module")
def composed(example_cfg):
    return compose_verl_config(build_overrides(example_cfg))


def test_example_composes_with_the_paper_setup(composed, example_cfg):
    c, arr = composed, composed.actor_rollout_ref
    assert (arr.model.path, arr.rollout.name, arr.rollout.mode, arr.rollout.n) == ("Qwen/Qwen3-8B", "vllm", "async", 4)
    assert (c.data.train_batch_size, arr.actor.ppo_mini_batch_size, arr.actor.optim.lr) == (16, 16, 1e-6)
    assert (arr.actor.clip_ratio_low, arr.actor.clip_ratio_high, arr.actor.clip_ratio_c) == (0.2, 0.2, 3.0)
    assert arr.actor.loss_agg_mode == "token-mean"
    assert (arr.actor.use_kl_loss, arr.actor.kl_loss_coef, arr.actor.kl_loss_type) == (True, 1e-4, "low_var_kl")
    assert (c.algorithm.adv_estimator, c.algorithm.norm_adv_by_std_in_grpo) == ("envace_role_grpo", False)
    assert (c.trainer.use_v1, c.trainer.v1.trainer_mode) == (True, "envace")
    assert (c.trainer.nnodes, c.trainer.n_gpus_per_node, c.trainer.total_training_steps) == (2, 8, 470)
    assert list(c.data.train_files) == ["/shared/envace/data/verl/cm2_train.parquet"]
    assert arr.rollout.agent.default_agent_loop == "envace_agent"
    assert Path(arr.rollout.agent.agent_loop_config_path) == AGENT_LOOPS_YAML and AGENT_LOOPS_YAML.is_file()
    assert Path(c.reward.custom_reward_function.path) == REWARD_FILE
    assert c.ray_kwargs.ray_init.runtime_env.env_vars.VERL_USE_EXTERNAL_MODULES == PLUGIN_MODULE
    assert LoopSettings.from_verl(c) == example_cfg.loop


def test_overrides_name_existing_keys_and_validate(verl_api, composed, example_cfg):
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import omega_conf_to_dataclass, validate_config

    default = compose_verl_config([])
    for override in build_overrides(example_cfg):
        key = override.split("=", 1)[0]
        if not key.startswith("+"):
            parent, _, leaf = key.rpartition(".")
            assert leaf in OmegaConf.select(default, parent).keys(), key  # keys(): '???' values count
    assert need_reference_policy(composed) and not need_critic(composed)  # KL on: a reference, no critic
    validate_config(composed, use_reference_policy=True, use_critic=False)
    algo = omega_conf_to_dataclass(composed.algorithm)
    rollout = omega_conf_to_dataclass(composed.actor_rollout_ref.rollout)
    actor = omega_conf_to_dataclass(composed.actor_rollout_ref.actor)
    assert (algo.adv_estimator, rollout.agent.default_agent_loop, actor.clip_ratio_c) == ("envace_role_grpo",
                                                                                          "envace_agent", 3.0)


def test_a_misspelled_key_is_refused(example_cfg):
    from hydra.errors import ConfigCompositionException

    with pytest.raises(ConfigCompositionException, match="clip_ratio_cc"):
        compose_verl_config(build_overrides(example_cfg) + ["actor_rollout_ref.actor.clip_ratio_cc=3"])


@pytest.mark.parametrize("text", ["/data/it's a dir/x=1,[y].parquet", "Qwen/Qwen3-8B", "http://judge:8000/v1",
                                  "true", "null", "1e-3", "12", "a b", "${oc.env:HOME}", "x\\y", "end\\", "q\\'x",
                                  "plain.parquet"])
def test_hydra_value_round_trips_strings(text):
    c = compose_verl_config([f"data.train_files={hydra_value([text])}", f"trainer.experiment_name={hydra_value(text)}"])
    assert list(c.data.train_files) == [text] and c.trainer.experiment_name == text


def test_dry_run_prints_the_runnable_command(capsys, example_cfg):
    assert main([str(EXAMPLE), "--dry-run", "n=8", "loop.mode=env", "loop.reward=env_state"]) == 0
    out = capsys.readouterr().out
    lines = out.strip().splitlines()
    assert lines[0].startswith("RAY_ADDRESS=")
    notes = [i for i, line in enumerate(lines) if line.startswith("#")]
    assert lines[notes[0]:notes[0] + 2] == ["# verl validate_config: ok", "# rollout name: vllm"]
    cmd = shlex.split(" ".join(line.rstrip("\\") for line in lines[1:notes[0]]))
    assert cmd[:3] == ["python", "-m", "verl.trainer.main_ppo"]
    assert "actor_rollout_ref.rollout.n=8" in cmd and "+envace.mode=env" in cmd
    assert cmd[3:] == build_overrides(load_config(VerlLaunchConfig, EXAMPLE,
                                                  ["n=8", "loop.mode=env", "loop.reward=env_state"]))


def test_launch_runs_main_ppo_against_the_cluster(tmp_path, example_cfg):
    record = tmp_path / "record.json"
    fake = tmp_path / "fake_python"
    fake.write_text(f"#!{sys.executable}\nimport json, os, sys\n"
                    f"json.dump({{'argv': sys.argv[1:], 'env': dict(os.environ)}}, open({str(record)!r}, 'w'))\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    data = [tmp_path / "train.parquet", tmp_path / "val.parquet"]
    for f in data:
        f.write_bytes(b"")  # the preflight checks that the files exist
    cfg = example_cfg.model_copy(update={"python": str(fake), "train_files": [str(data[0])],
                                         "val_files": [str(data[1])],
                                         "loop": example_cfg.loop.model_copy(update={"reward": "checklist_rule"})})
    cmd = launch_verl(cfg, environ={"RAY_ADDRESS": "10.0.0.1:6379", "PATH": "/usr/bin",
                                    "MLFLOW_TRACKING_URI": "http://mlflow:5000"}, node_gpus=lambda address: [8, 8])
    seen = json.loads(record.read_text())
    assert seen["argv"] == cmd[1:] and seen["argv"][:2] == ["-m", "verl.trainer.main_ppo"]
    assert seen["env"]["RAY_ADDRESS"] == "10.0.0.1:6379"
    assert seen["env"]["VERL_USE_EXTERNAL_MODULES"] == PLUGIN_MODULE
    # the job's runtime env carries the plugin and MLflow's address to every Ray worker
    assert "+ray_kwargs.ray_init.runtime_env.env_vars.MLFLOW_TRACKING_URI=http://mlflow:5000" in cmd
    assert f"+ray_kwargs.ray_init.runtime_env.env_vars.VERL_USE_EXTERNAL_MODULES={PLUGIN_MODULE}" in cmd


def test_launch_needs_a_ray_cluster(example_cfg):
    with pytest.raises(ConfigError, match="RAY_ADDRESS"):
        launch_verl(example_cfg, environ={})


def test_config_errors_name_the_fix(example_cfg):
    # (pydantic wraps a validator's ConfigError in a ValidationError; both are ValueErrors)
    # role temperatures other than rollout.temperature are honoured (per-row log-probs), no longer refused
    VerlLaunchConfig(model="m", train_files=["x"], loop=LoopSettings(rehearse={"temperature": 0.01}))
    with pytest.raises(ValueError, match="not divisible"):
        VerlLaunchConfig(model="m", train_files=["x"], train_batch_size=3, n=3)
    with pytest.raises(ValueError, match="simulator.base_url"):
        LoopSettings(mode="simulator")
    bad = compose_verl_config(build_overrides(example_cfg) + ["envace.mode=sim"])
    with pytest.raises(ConfigError, match="envace.mode"):
        LoopSettings.from_verl(bad)


@pytest.mark.parametrize(("field", "value", "reason", "fix"), [
    ("adv_estimator", "role_moving_average", "state carried across steps and checkpoints",
     "set adv_estimator=envace_role_grpo, or train with envace train --backend embedded"),
    ("adv_estimator", "envace_role_moving_average", "state carried across steps and checkpoints",
     "set adv_estimator=envace_role_grpo"),
    ("loop", {"echo_coef": 0.05}, "the echo arm runs on the embedded backend only", "set envace.echo_coef=0"),
])
def test_the_world_model_knobs_are_refused_in_one_line(tmp_path, field, value, reason, fix):
    from pydantic import ValidationError

    with pytest.raises(ValidationError) as e:
        VerlLaunchConfig(model="m", train_files=["x"], **{field: value})
    (err,) = e.value.errors()
    assert reason in err["msg"] and fix in err["msg"] and "\n" not in err["msg"]
    if field == "adv_estimator":  # from a launch YAML, as `envace train --backend verl` reads it
        path = tmp_path / "launch.yaml"
        path.write_text(f"model: m\ntrain_files: [x]\nadv_estimator: {value}\n")
        with pytest.raises(ConfigError, match=f"adv_estimator.*{reason}") as ce:
            load_config(VerlLaunchConfig, path)
        assert ce.value.field.endswith("adv_estimator")  # the file, then the field


def test_attention_and_log_prob_memory_match_the_install(composed, example_cfg):
    arr = composed.actor_rollout_ref
    # requirements/gpu-cluster.txt installs no flash-attn: torch's sdpa on padded micro-batches
    reqs = (EXAMPLE.parents[2] / "requirements" / "gpu-cluster.txt").read_text().lower().splitlines()
    assert not [line for line in reqs if "flash" in line and not line.startswith("#")]
    assert arr.model.override_config.attn_implementation == "sdpa" and arr.model.use_remove_padding is False
    # sdpa pads a micro-batch to its longest row: one row per micro-batch for log-probs and the update
    assert not (arr.actor.use_dynamic_bsz or arr.rollout.log_prob_use_dynamic_bsz or arr.ref.log_prob_use_dynamic_bsz)
    assert (arr.actor.ppo_micro_batch_size_per_gpu, arr.rollout.log_prob_micro_batch_size_per_gpu,
            arr.ref.log_prob_micro_batch_size_per_gpu) == (1,) * 3
    # packed rows (flash-attention 2): micro-batches by real-token count, capped at one row of max_model_len
    flash = compose_verl_config(build_overrides(example_cfg.model_copy(update={"attn_implementation":
                                                                               "flash_attention_2",
                                                                               "micro_batching": "auto"})))
    farr = flash.actor_rollout_ref
    assert farr.model.use_remove_padding is True and farr.actor.entropy_from_logits_with_chunking is True
    assert farr.actor.use_dynamic_bsz and farr.rollout.log_prob_use_dynamic_bsz and farr.ref.log_prob_use_dynamic_bsz
    assert (farr.actor.ppo_max_token_len_per_gpu, farr.rollout.log_prob_max_token_len_per_gpu,
            farr.ref.log_prob_max_token_len_per_gpu) == (20000,) * 3
    with pytest.raises((ConfigError, ValueError), match="max_tokens_per_gpu 8000 < max_model_len 20000"):
        load_config(VerlLaunchConfig, EXAMPLE, ["max_tokens_per_gpu=8000"])


def test_cluster_paths_must_be_absolute(example_cfg, tmp_path):
    from envace.trainers.verl.launcher import cluster_path_problems, launch_verl

    assert cluster_path_problems(example_cfg) == []
    rel = example_cfg.model_copy(update={"train_files": ["data/verl/train.parquet"], "checkpoint_dir": None,
                                         "val_files": ["hdfs://nn/envace/val.parquet"]})
    problems = cluster_path_problems(rel)
    assert len(problems) == 2 and problems[0].startswith("train_files[0] = 'data/verl/train.parquet' is relative")
    assert "checkpoint_dir is unset on a 2-node job" in problems[1]
    with pytest.raises(ConfigError, match="train_files\\[0\\] = 'data/verl/train.parquet' is relative"):
        launch_verl(rel, dry_run=True)
    one_node = rel.model_copy(update={"nnodes": 1, "n_gpus_per_node": 8, "train_files": [str(tmp_path / "t.parquet")]})
    assert cluster_path_problems(one_node) == []
    assert cluster_path_problems(one_node.model_copy(update={"checkpoint_dir": "ckpt"})) == [
        "checkpoint_dir = 'ckpt' is relative; give an absolute path on shared storage"]


def test_per_role_needs_vllm():
    with pytest.raises((ConfigError, ValueError), match="policy=per_role runs its Rehearse servers on vLLM"):
        load_config(VerlLaunchConfig, EXAMPLE, ["policy=per_role", "rollout=sglang"])
