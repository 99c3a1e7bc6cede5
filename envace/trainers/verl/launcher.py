"""`envace train --backend verl CONFIG`: the Hydra overrides and the `python -m verl.trainer.main_ppo`
command of one EnvACE run on an existing Ray cluster.

`build_overrides(cfg)` maps a `VerlLaunchConfig` onto verl 0.9.1's `ppo_trainer` config keys (model,
vLLM/SGLang async rollout, n = K, lengths, PPO clip + dual clip, token-mean, the KL switch, lr, batch,
data files, nodes x GPUs, the envace agent loop / trainer / estimator / reward function, and the
`envace:` section the agent loop reads). `launch_verl(cfg)` runs the command against `RAY_ADDRESS`
with `VERL_USE_EXTERNAL_MODULES=envace.trainers.verl_plugin` in the job's runtime env, so every Ray
worker registers envace even where the `verl.plugins` entry point is not installed.
`compose_verl_config(overrides)` composes verl's own Hydra config with them (no GPU needed): an unknown
key or a bad value fails there, before any cluster time is spent. Before `main_ppo` starts, `launch_verl`
runs the preflight (preflight.py: MLflow address, data files, judge probe, the cluster's GPUs); the dry run
prints the memory estimate of the log-prob and update paths (memory.py). Log-prob / update micro-batches
are a fixed row count with sdpa (verl pads a micro-batch to its longest row) and a real-token cap with
remove-padding. The workers get an allowlist of this machine's environment (`job_env`).

Departures from the reference launcher: verl 0.9.1's V1 trainer instead of a forked verl 0.3; one
optimizer step per training step (or `ppo_mini_batches` x `ppo_epochs`) comes from the envace trainer
(`envace.single_update`) rather than an adaptive mini-batch size.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from envace.config import ConfigError, load_config
from envace.trainers.verl.config import LOOP_SECTION, VerlLaunchConfig, per_role_resources

PLUGIN_MODULE = "envace.trainers.verl_plugin"
MAIN_MODULE = "verl.trainer.main_ppo"
AGENT_LOOPS_YAML = Path(__file__).with_name("agent_loops.yaml")
REWARD_FILE = Path(__file__).with_name("reward.py")
# copied into every Ray worker when set, with the config's forward_env and the endpoints' api_key_env; not
# HF_HUB_OFFLINE / TRANSFORMERS_OFFLINE, which the envace command sets for itself and which would stop the
# workers from downloading a hub model (name them in forward_env to send them)
FORWARDED_ENV = ("MLFLOW_TRACKING_URI", "HF_HOME")


_PLAIN = re.compile(r"[A-Za-z_/][A-Za-z0-9_/.:@%+-]*")
_RESERVED = {"true", "false", "null", "nan", "inf", "-inf", "+inf"}


def hydra_value(value: Any) -> str:
    """A value in Hydra's override grammar: lists bracketed, None as null, a string bare when Hydra reads
    it back as that same string (paths, names, URLs), else single-quoted with escapes."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(hydra_value(v) for v in value) + "]"
    text = str(value)
    if _PLAIN.fullmatch(text) and text.lower() not in _RESERVED:
        return text
    # Hydra quoted strings: backslashes are literal except in a run before a quote or the end (doubled
    # there); quotes are escaped; OmegaConf would still interpolate ${...}, so it is escaped too
    escaped = re.sub(r"(\\+)(?='|$)", lambda m: m.group(1) * 2, text).replace("'", "\\'").replace("${", "\\${")
    return f"'{escaped}'"


def _flat(prefix: str, data: dict[str, Any]) -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for key, value in data.items():
        path = f"{prefix}.{key}"
        if isinstance(value, dict):
            out.extend(_flat(path, value))
        elif value is not None:
            out.append((path, value))
    return out


def build_overrides(cfg: VerlLaunchConfig, environ: dict[str, str] | None = None) -> list[str]:
    """verl Hydra overrides for `cfg`, in a stable order (raw `cfg.overrides` last, so they win).
    `environ` (default os.environ) supplies the variables forwarded to every Ray worker."""
    arr = "actor_rollout_ref"
    kv: list[tuple[str, Any]] = [
        (f"{arr}.model.path", cfg.model),
        # remove-padding (packed rows) needs flash-attn's varlen kernels; sdpa runs on padded micro-batches
        (f"{arr}.model.use_remove_padding", cfg.attn_implementation == "flash_attention_2"),
        (f"{arr}.model.enable_gradient_checkpointing", True),
        (f"{arr}.actor.optim.lr", cfg.lr),
        # M mini-batches of train_batch_size / M prompts each, ppo_epochs passes: the embedded trainer's
        # algo.ppo_mini_batches / algo.ppo_epochs (with envace.single_update the envace trainer makes it
        # exactly M optimizer steps per epoch whatever the number of role-call rows)
        (f"{arr}.actor.ppo_mini_batch_size", cfg.train_batch_size // cfg.ppo_mini_batches),
        (f"{arr}.actor.ppo_micro_batch_size_per_gpu", cfg.micro_batch_per_gpu),
        # micro-batches (log-probs and the update): by real-token count when rows are packed (remove-padding);
        # by a fixed row count otherwise, since sdpa pads every row of a micro-batch to its longest and a
        # token cap would let one long row and many short ones become rows x longest padded tokens (memory.py)
        (f"{arr}.actor.use_dynamic_bsz", cfg.micro_batching_mode() == "tokens"),
        (f"{arr}.actor.ppo_max_token_len_per_gpu", cfg.token_cap()),
        (f"{arr}.rollout.log_prob_max_token_len_per_gpu", cfg.token_cap()),
        (f"{arr}.ref.log_prob_max_token_len_per_gpu", cfg.token_cap()),
        # the old log-probs' entropy in chunks: only verl's remove-padding path reads this switch
        (f"{arr}.actor.entropy_from_logits_with_chunking", cfg.attn_implementation == "flash_attention_2"),
        (f"{arr}.actor.ppo_epochs", cfg.ppo_epochs),
        (f"{arr}.actor.clip_ratio_low", cfg.clip_low),
        (f"{arr}.actor.clip_ratio_high", cfg.clip_high),
        (f"{arr}.actor.clip_ratio_c", cfg.dual_clip_c),
        (f"{arr}.actor.loss_agg_mode", cfg.loss_agg_mode),
        (f"{arr}.actor.entropy_coeff", 0),
        (f"{arr}.actor.use_kl_loss", cfg.use_kl),
        (f"{arr}.actor.kl_loss_coef", cfg.kl_coef),
        (f"{arr}.actor.kl_loss_type", cfg.kl_type),
        (f"{arr}.actor.fsdp_config.param_offload", False),
        (f"{arr}.actor.fsdp_config.optimizer_offload", True),
        (f"{arr}.ref.fsdp_config.param_offload", True),
        (f"{arr}.ref.log_prob_micro_batch_size_per_gpu", cfg.log_prob_micro_batch_per_gpu),
        (f"{arr}.rollout.name", cfg.rollout),
        (f"{arr}.rollout.mode", "async"),
        (f"{arr}.rollout.n", cfg.n),
        (f"{arr}.rollout.temperature", cfg.temperature),
        (f"{arr}.rollout.top_p", 1.0),
        (f"{arr}.rollout.prompt_length", cfg.rollout_prompt_length),
        (f"{arr}.rollout.response_length", cfg.max_response_length),
        (f"{arr}.rollout.max_model_len", cfg.max_model_len),
        (f"{arr}.rollout.tensor_model_parallel_size", cfg.tensor_parallel),
        (f"{arr}.rollout.gpu_memory_utilization", cfg.gpu_memory_utilization),
        (f"{arr}.rollout.calculate_log_probs", True),
        (f"{arr}.rollout.log_prob_micro_batch_size_per_gpu", cfg.log_prob_micro_batch_per_gpu),
        (f"{arr}.rollout.val_kwargs.n", cfg.n),
        (f"{arr}.rollout.val_kwargs.temperature", 0.6),
        (f"{arr}.rollout.val_kwargs.top_p", 0.95),
        (f"{arr}.rollout.val_kwargs.do_sample", True),
        (f"{arr}.rollout.agent.default_agent_loop", "envace_agent"),
        (f"{arr}.rollout.agent.agent_loop_config_path", str(AGENT_LOOPS_YAML)),
        ("algorithm.adv_estimator", cfg.adv_estimator),
        ("algorithm.norm_adv_by_std_in_grpo", cfg.norm_std),
        ("algorithm.use_kl_in_reward", False),
        ("data.train_files", list(cfg.train_files)),
        ("data.val_files", list(cfg.val_files or cfg.train_files)),
        ("data.train_batch_size", cfg.train_batch_size),
        # verl's V1 trainer still batches validation by it (trainer_base._init_dataloader; its validate_config
        # calls the key deprecated); unset, the whole validation set goes to the servers at once
        ("data.val_batch_size", cfg.val_batch_size or cfg.train_batch_size),
        ("data.max_prompt_length", cfg.max_prompt_length),
        ("data.max_response_length", cfg.max_response_length),
        ("data.filter_overlong_prompts", True),
        ("data.return_raw_chat", True),
        ("reward.custom_reward_function.path", str(REWARD_FILE)),
        ("reward.custom_reward_function.name", "compute_score"),
        ("trainer.use_v1", True),
        ("trainer.v1.trainer_mode", "envace"),
        ("trainer.nnodes", cfg.nnodes),
        ("trainer.n_gpus_per_node", cfg.n_gpus_per_node),
        ("trainer.total_epochs", cfg.total_epochs),
        ("trainer.total_training_steps", cfg.total_training_steps),
        ("trainer.save_freq", cfg.save_freq),
        ("trainer.max_actor_ckpt_to_keep", cfg.max_checkpoints_kept),
        ("trainer.test_freq", cfg.test_freq),
        ("trainer.project_name", cfg.project),
        ("trainer.experiment_name", cfg.experiment),
        ("trainer.logger", list(cfg.loggers)),
    ]
    if cfg.checkpoint_dir:
        kv.append(("trainer.default_local_dir", cfg.checkpoint_dir))
    out = [f"{k}={hydra_value(v)}" for k, v in kv]
    # new keys: '+' adds them to verl's struct config
    out.append(f"+{arr}.model.override_config.attn_implementation={cfg.attn_implementation}")
    loop = cfg.loop.model_copy(update={"ppo_mini_batches": cfg.ppo_mini_batches, "policy": cfg.policy})
    out += [f"+{k}={hydra_value(v)}" for k, v in _flat(LOOP_SECTION, loop.model_dump(mode="json"))]
    for name, value in job_env(cfg, environ).items():
        out.append(f"+ray_kwargs.ray_init.runtime_env.env_vars.{name}={hydra_value(value)}")
    return out + list(cfg.overrides)


def forwarded_names(cfg: VerlLaunchConfig) -> list[str]:
    """The allowlist of variables copied from this machine into the job (when set here)."""
    keys = [e.api_key_env for e in (cfg.loop.judge, cfg.loop.simulator) if e is not None and e.api_key_env]
    return list(dict.fromkeys([*FORWARDED_ENV, *keys, *cfg.forward_env]))


def job_env(cfg: VerlLaunchConfig, environ: dict[str, str] | None = None) -> dict[str, str]:
    """Environment variables every Ray worker of the job gets: the plugin, and the allowlisted variables
    set here (MLflow, HF cache, the judge's / simulator's API key variable, `forward_env`)."""
    environ = os.environ if environ is None else environ
    env = {"VERL_USE_EXTERNAL_MODULES": PLUGIN_MODULE}
    env.update({k: environ[k] for k in forwarded_names(cfg) if environ.get(k)})
    return env


REMOTE = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")  # hdfs://, s3://, gs://: verl copies those itself


def cluster_path_problems(cfg: VerlLaunchConfig) -> list[str]:
    """What stops the job's paths from meaning the same on every node: relative data files (verl's workers
    resolve them against their own working directory), a relative checkpoint dir, or none on a
    multi-node job (verl's default is relative to each process's working directory)."""
    problems = []
    for field in ("train_files", "val_files"):
        for i, path in enumerate(getattr(cfg, field)):
            if not REMOTE.match(path) and not os.path.isabs(path):
                problems.append(f"{field}[{i}] = {path!r} is relative; give an absolute path every node can read "
                                f"(e.g. {os.path.abspath(path)} on shared storage)")
    if cfg.checkpoint_dir is None:
        if cfg.nnodes > 1:
            problems.append(f"checkpoint_dir is unset on a {cfg.nnodes}-node job; set an absolute path on shared "
                            "storage (verl's default is relative to each process's working directory)")
    elif not REMOTE.match(cfg.checkpoint_dir) and not os.path.isabs(cfg.checkpoint_dir):
        problems.append(f"checkpoint_dir = {cfg.checkpoint_dir!r} is relative; give an absolute path on shared "
                        "storage")
    return problems


def check_cluster_paths(cfg: VerlLaunchConfig) -> None:
    problems = cluster_path_problems(cfg)
    if problems:
        raise ConfigError("verl launch config: " + "; ".join(problems))


def verl_command(cfg: VerlLaunchConfig, environ: dict[str, str] | None = None) -> list[str]:
    return [cfg.python, "-m", MAIN_MODULE, *build_overrides(cfg, environ)]


def verl_config_dir() -> Path:
    """verl's Hydra config directory, found without importing verl (its import is slow)."""
    from envace.extras import MissingExtra, spec
    from envace.trainers.verl.deps import CLUSTER, INSTALL_VERL

    found = spec("verl")
    if found is None or not found.submodule_search_locations:
        raise MissingExtra("verl is not installed", "composing verl's config", INSTALL_VERL, CLUSTER)
    return Path(list(found.submodule_search_locations)[0]) / "trainer" / "config"


def compose_verl_config(overrides: list[str]) -> Any:
    """verl's `ppo_trainer` config composed with `overrides` (Hydra's compose API; CPU only)."""
    config_dir = verl_config_dir()  # first: no verl (and its hydra) is the cluster extra's one-line error
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(config_dir), version_base=None):
        return compose(config_name="ppo_trainer", overrides=list(overrides))


def validate_composed(composed: Any) -> list[str]:
    """verl's own `validate_config` on the composed config (batch sizes, micro-batches, dynamic batch size,
    rollout settings), and the rollout name each actor's servers run under; the lines the dry run prints."""
    import contextlib

    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    from envace.trainers.verl.config import LoopSettings

    with contextlib.redirect_stdout(sys.stderr):  # verl prints its verdict; stdout stays the runnable command
        validate_config(composed, use_reference_policy=need_reference_policy(composed),
                        use_critic=need_critic(composed))
    lines = ["# verl validate_config: ok"]
    name = str(composed.actor_rollout_ref.rollout.name)
    if LoopSettings.from_verl(composed).policy == "per_role":
        from envace.trainers.verl.rollout_names import rehearse_config

        rehearse = str(rehearse_config(composed).actor_rollout_ref.rollout.name)
        lines.append(f"# rollout names: act={name} (servers {name}_server_<replica>_<node>), rehearse={rehearse} "
                     f"(servers {rehearse}_server_<replica>_<node>)")
    else:
        lines.append(f"# rollout name: {name}")
    return lines


def launch_verl(cfg: VerlLaunchConfig, *, dry_run: bool = False, environ: dict[str, str] | None = None,
                node_gpus: Callable[[str], Sequence[float]] | None = None) -> list[str]:
    """Run verl's main_ppo for `cfg` against the Ray cluster at `cfg.ray_address` / $RAY_ADDRESS (blocking),
    after the preflight checks (preflight.py: MLflow address, data files, judge / simulator endpoints, the
    cluster's GPUs; `node_gpus(address)` gives the GPUs per node, default: asked from Ray).

    Returns the command. With `dry_run` nothing runs and no cluster is needed.
    """
    environ = dict(os.environ if environ is None else environ)
    check_cluster_paths(cfg)
    cmd = verl_command(cfg, environ)
    if dry_run:
        return cmd
    address = cfg.ray_address or environ.get("RAY_ADDRESS")
    if not address:
        raise ConfigError("no Ray cluster: set ray_address in the config or export RAY_ADDRESS=<head>:6379 "
                          "(start one with `ray start --head` on the head node and `ray start --address=...` "
                          "on the others)")
    from envace.trainers.verl.preflight import preflight, ray_node_gpus

    preflight(cfg, environ, address=address, node_gpus=node_gpus or ray_node_gpus)
    environ.update({"RAY_ADDRESS": address, **job_env(cfg, environ)})
    subprocess.run(cmd, env=environ, check=True)
    return cmd


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="envace train --backend verl",
                                     description="Run EnvACE on verl 0.9.1 (Ray + vLLM) from an envace config.")
    parser.add_argument("config", help="YAML of VerlLaunchConfig (e.g. configs/verl/qwen3_8b_cm2.yaml)")
    parser.add_argument("overrides", nargs="*", help="key=value overrides of the envace config")
    parser.add_argument("--dry-run", action="store_true", help="print the command and overrides; run nothing")
    parser.add_argument("--check", action="store_true", help="compose verl's Hydra config with the overrides first")
    parser.add_argument("--show-config", action="store_true", help="with --dry-run: also print the composed config")
    args = parser.parse_intermixed_args(argv)
    cfg = load_config(VerlLaunchConfig, args.config, args.overrides)
    composed = compose_verl_config(build_overrides(cfg)) if (args.check or args.dry_run) else None
    checked = validate_composed(composed) if composed is not None else []
    cmd = launch_verl(cfg, dry_run=args.dry_run)
    if args.dry_run:
        print(f"RAY_ADDRESS={cfg.ray_address or os.environ.get('RAY_ADDRESS', '<unset>')} \\")
        print(" \\\n    ".join(shlex.quote(c) for c in cmd))
        for line in checked:
            print(line)
        if cfg.policy == "per_role":
            print(f"# {per_role_resources(cfg)}")
        from envace.trainers.verl.memory import memory_lines
        from envace.trainers.verl.preflight import mlflow_problem

        for line in memory_lines(cfg):
            print(line)
        warning = mlflow_problem(cfg, dict(os.environ))
        if warning:  # the launch itself refuses it
            print(f"# warning: {warning}")
        if args.show_config:
            from omegaconf import OmegaConf

            print("# composed verl config (unresolved):")
            print(OmegaConf.to_yaml(composed))
    return 0


if __name__ == "__main__":
    sys.exit(main())
