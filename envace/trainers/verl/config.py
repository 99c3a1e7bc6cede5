"""Configs of the verl backend: `LoopSettings` (the `envace:` section that rides inside verl's Hydra
config and is read by the agent loop and the trainer in every Ray process) and `VerlLaunchConfig`
(what `envace train --backend verl CONFIG` reads to build the Hydra overrides).

Role sampling: each role's temperature / top_p default to verl's own per-call sampling parameters
(`rollout.temperature`, or `rollout.val_kwargs.*` during validation). A role temperature may differ
from `rollout.temperature` (the paper: Act 1.0, Rehearse 0.01): the agent loop records each call's
temperature on its row and envace's trainer computes the old, reference and updated log-probs of every
row at it (trainer.py, temperature.py), envace's rule on both backends.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator, model_validator

from envace.config import BaseConfig, ConfigError, EpisodeRules
from envace.trainers.unscored_guard import UnscoredGuardConfig

LOOP_SECTION = "envace"  # top-level key of the Hydra config holding LoopSettings
class EndpointConfig(BaseConfig):
    base_url: str = Field(..., description="OpenAI-compatible server, e.g. http://judge-host:8000/v1.")
    model: str = Field(..., description="Served model name (vllm serve --served-model-name).")
    api_key_env: str | None = Field(None, description="Environment variable holding the API key (not the key).")
    timeout_s: float = Field(120.0, gt=0, description="Per-request timeout in seconds (reference judge: 120).")
    max_retries: int = Field(4, ge=0, description="Transport retries per request.")


class RoleSampling(BaseConfig):
    temperature: float | None = Field(None, ge=0.0, le=10.0,
                                      description="Role temperature; None = verl's rollout (or val) temperature.")
    top_p: float | None = Field(None, gt=0.0, le=1.0, description="Role nucleus mass; None = verl's.")
    max_tokens: int | None = Field(None, ge=1, description="Most tokens a call writes; None = rollout.response_length.")


class LoopSettings(EpisodeRules):
    """The `envace:` section of the verl config: rollout mode, role sampling, limits, reward, endpoints, and
    the episode rules (`envace.invalid_call`, ...: the embedded rollout's own switches, envace.config)."""

    mode: Literal["rehearse", "env", "simulator"] = Field(
        "rehearse", description="Observation source: rehearse (EnvACE), env (real tool world), simulator (act-only).")
    act: RoleSampling = Field(default_factory=RoleSampling, description="Sampling of the Act role.")
    rehearse: RoleSampling = Field(default_factory=RoleSampling, description="Sampling of the Rehearse role.")
    max_assistant_turns: int = Field(30, ge=1, description="Act generations per episode (reference: 30).")
    max_calls_per_turn: int = Field(20, ge=1, description="Tool calls per user turn (reference: 20).")
    max_context_tokens: int | None = Field(
        None, ge=32, description="Prompt + response limit of one call; None = rollout prompt + response length.")
    few_shot: bool = Field(True, description="Show the task's reference (call, response) pairs to Rehearse.")
    rehearse_style: Literal["full", "compact"] = Field("full", description="Rehearse system prompt style.")
    enable_thinking: bool | None = Field(
        None, description="Chat template thinking switch; None = data.apply_chat_template_kwargs.enable_thinking.")
    reward: Literal["checklist_rule", "checklist_llm", "env_state"] = Field(
        "checklist_rule", description="Reward the loop sets on every row: rule judge, LLM judge, or world end state.")
    judge: EndpointConfig | None = Field(None, description="LLM judge endpoint (reward=checklist_llm).")
    judge_temperature: float = Field(0.6, ge=0, description="Judge sampling temperature (reference: 0.6).")
    judge_attempts: int = Field(5, ge=1, description="Judge attempts per item before a judge error (reference: 5).")
    simulator: EndpointConfig | None = Field(None, description="Frozen simulator endpoint (mode=simulator).")
    weighting: Literal["per_output", "per_trajectory"] = Field(
        "per_output", description="Role baseline weighting (reference code: per_output).")
    policy: Literal["shared", "per_role"] = Field(
        "shared", description="One model for both roles, or one per role (set from the launch config's policy).")
    single_update: bool = Field(True,
                                description="ppo_mini_batches optimizer steps per epoch (paper: 1), any row count.")
    ppo_mini_batches: int = Field(1, ge=1, description="With single_update: the step's rows split into this many "
                                                       "equal mini-batches (set from the launch config's "
                                                       "ppo_mini_batches).")
    empty_output_penalty: float = Field(0.0, ge=0, description="Refused above 0 on verl (the embedded trainer's "
                                                               "algo.empty_output_penalty applies it per row).")
    unscored: UnscoredGuardConfig = Field(default_factory=UnscoredGuardConfig,
                                          description="Stop the run when the judge leaves most episodes unscored "
                                                      "for several steps (envace.trainers.unscored_guard).")
    seed: int = Field(0, description="Sampling seeds derive from (seed, step, prompt index, sample, role, call).")
    threads: int = Field(256, ge=1, description="Episode threads per agent-loop worker (mostly waiting on the server).")
    echo_coef: float = Field(0.0, ge=0, description="The echo arm (embedded: algo.echo_coef); refused here: > 0 "
                                                    "runs on the embedded backend only.")
    grounded_fraction: float = Field(0.0, ge=0, le=1, description="The grounded arm (embedded: grounded.fraction); "
                                                                  "refused here: > 0 runs on the embedded backend "
                                                                  "only.")

    @model_validator(mode="after")
    def _check(self) -> LoopSettings:
        if self.empty_output_penalty > 0:
            # verl 0.9.1's V1 adapter (agent_loop_tq._agent_loop_postprocess) copies the last output's
            # reward_score onto every earlier output of the episode, so a per-row penalty lands on the wrong rows
            raise ConfigError(f"envace.empty_output_penalty={self.empty_output_penalty}: verl's V1 agent-loop adapter "
                              "copies an episode's last row reward onto its other rows, so a per-row penalty would "
                              "hit the wrong rows; set envace.empty_output_penalty=0 (the embedded trainer applies "
                              "it per row: algo.empty_output_penalty)")
        for key, arm in (("echo_coef", "echo"), ("grounded_fraction", "grounded")):
            if getattr(self, key) > 0:  # the reason is the arm's own (Arm.verl_refusal, envace.trainers.arms)
                from envace.trainers.arms import verl_refusal_message

                raise ConfigError(verl_refusal_message(arm, f"envace.{key}={getattr(self, key)}",
                                                       f"set envace.{key}=0"))
        if self.mode == "simulator" and self.simulator is None:
            raise ConfigError("envace.mode='simulator' needs envace.simulator.base_url and envace.simulator.model "
                              "(the frozen simulator's OpenAI-compatible endpoint)")
        if self.reward == "checklist_llm" and self.judge is None:
            raise ConfigError("envace.reward='checklist_llm' needs envace.judge.base_url and envace.judge.model "
                              "(e.g. a vLLM server with Qwen3-30B-A3B)")
        if self.reward == "env_state" and self.mode == "rehearse":
            raise ConfigError("envace.reward='env_state' reads a real environment, which rehearse mode never "
                              "touches; use envace.reward=checklist_rule (or envace.mode=env)")
        return self

    @classmethod
    def from_verl(cls, config: Any) -> LoopSettings:
        """Read the `envace:` section of a verl DictConfig (absent = all defaults)."""
        from omegaconf import OmegaConf

        section = config.get(LOOP_SECTION) if hasattr(config, "get") else None
        data = OmegaConf.to_container(section, resolve=True) if OmegaConf.is_config(section) else (section or {})
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            lines = [f"verl config: field '{LOOP_SECTION}.{'.'.join(str(p) for p in e['loc'])}' = "
                     f"{e.get('input')!r}: {e['msg']}" for e in exc.errors()]
            raise ConfigError("\n".join(lines) + "\nfix the +envace.* overrides (see configs/verl/)") from None


class MemoryShape(BaseConfig):
    """What the dry run's memory estimate needs beyond the launch settings (envace.trainers.verl.memory)."""

    vocab: int = Field(151_936, ge=1, description="Vocabulary size (Qwen3: 151,936).")
    hidden: int = Field(4096, ge=1, description="Hidden size (Qwen3-8B: 4096).")
    layers: int = Field(36, ge=1, description="Decoder layers (Qwen3-8B: 36).")
    rows: list[int] = Field(default_factory=list, description="Real token lengths of rows one GPU may get in a "
                                                              "step (a late Act turn, Rehearse calls, ...); empty "
                                                              "= one row of max_model_len.")


class VerlLaunchConfig(BaseConfig):
    """`envace train --backend verl CONFIG`: one verl run of EnvACE on an existing Ray cluster."""

    model: str = Field(..., description="HF model path or name on every node (paper: Qwen3-8B).")
    policy: Literal["shared", "per_role"] = Field(
        "shared", description="One model for both roles, or one per role (the embedded trainer's switch; per_role "
                              "on verl adds a Rehearse actor on as many GPUs again, see docs/gpu.md).")
    train_files: list[str] = Field(..., min_length=1, description="verl parquet files (envace data export CM2 OUT).")
    val_files: list[str] = Field(default_factory=list, description="Validation parquet files (empty = train files).")
    val_batch_size: int | None = Field(None, ge=1, description="Prompts per validation batch (data.val_batch_size); "
                                                               "None = train_batch_size. verl's default sends the "
                                                               "whole validation set to the servers at once.")
    rollout: Literal["vllm", "sglang"] = Field("vllm", description="Rollout server backend.")
    n: int = Field(4, ge=2, description="Trajectories per prompt K (paper: 4).")
    train_batch_size: int = Field(16, ge=1, description="Prompts per training step (paper: 16).")
    lr: float = Field(1e-6, gt=0, description="Actor learning rate (paper: 1e-6).")
    clip_low: float = Field(0.2, gt=0, lt=1, description="PPO clip epsilon low.")
    clip_high: float = Field(0.2, gt=0, description="PPO clip epsilon high.")
    dual_clip_c: float = Field(3.0, gt=1, description="Dual-clip constant c.")
    loss_agg_mode: Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"] = Field(
        "token-mean", description="Loss aggregation.")
    use_kl: bool = Field(False, description="KL to the reference (paper: on at 1e-4; reference script: off).")
    kl_coef: float = Field(1e-4, ge=0, description="KL loss coefficient.")
    kl_type: Literal["low_var_kl", "kl", "mse", "abs"] = Field("low_var_kl", description="KL estimator.")
    adv_estimator: Literal["envace_role_grpo", "grpo"] = Field(
        "envace_role_grpo", description="envace_role_grpo (role-wise, EnvACE) or verl's plain grpo baseline; the "
                                        "embedded trainer's role_moving_average is refused here.")
    norm_std: bool = Field(False, description="Divide advantages by the group std (paper: off).")
    temperature: float = Field(1.0, ge=0, description="verl rollout temperature (reference training: 1.0).")
    allow_temperature_mismatch: bool = Field(
        False, description="Deprecated, no effect: role temperatures are honoured in the log-probs (kept so old "
                           "configs load).")
    max_prompt_length: int = Field(4000, ge=16, description="First-prompt limit; longer rows dropped (ref.: 4000).")
    rollout_prompt_length: int = Field(12000, ge=16, description="Prompt limit of any role call (reference: 12000).")
    max_response_length: int = Field(8000, ge=1, description="Tokens per role call (reference: 8000).")
    max_model_len: int = Field(20000, ge=32, description="Server context length (reference: 20000).")
    tensor_parallel: int = Field(1, ge=1, description="Rollout tensor parallel size (reference: 1).")
    gpu_memory_utilization: float = Field(0.5, gt=0, le=1, description="Rollout server memory share (reference: 0.5).")
    micro_batch_per_gpu: int = Field(1, ge=1, description="PPO micro-batch per GPU (reference: 1).")
    ppo_epochs: int = Field(1, ge=1, description="Passes over each rollout batch (actor.ppo_epochs; "
                                                 "embedded: algo.ppo_epochs).")
    ppo_mini_batches: int = Field(1, ge=1, description="Optimizer steps per epoch (embedded: algo.ppo_mini_batches); "
                                                       "divides train_batch_size.")
    log_prob_micro_batch_per_gpu: int = Field(1, ge=1, description="Rows per log-prob micro-batch with "
                                                                    "micro_batching=rows (reference: 8; sdpa pads "
                                                                    "them all to the longest, so 1).")
    micro_batching: Literal["auto", "rows", "tokens"] = Field(
        "auto", description="Log-prob / update micro-batches: rows (a fixed row count: micro_batch_per_gpu, "
                            "log_prob_micro_batch_per_gpu) or tokens (verl's dynamic batch size, max_tokens_per_gpu "
                            "real tokens; needs remove-padding, i.e. flash_attention_2); auto = rows with sdpa, "
                            "tokens with flash_attention_2.")
    max_tokens_per_gpu: int | None = Field(
        None, ge=1, description="With micro_batching=tokens: real-token cap of one micro-batch per GPU for log-probs "
                                "and the update; None = max_model_len. At least one whole row: >= max_model_len.")
    attn_implementation: Literal["sdpa", "flash_attention_2"] = Field(
        "sdpa", description="Actor / reference attention: sdpa (torch, padded micro-batches) or flash_attention_2 "
                            "(remove-padding; needs flash-attn installed on every node, see docs/gpu.md).")
    memory: MemoryShape = Field(default_factory=lambda: MemoryShape(),
                                description="Model sizes and row mix of the dry run's memory estimate.")
    nnodes: int = Field(2, ge=1, description="Nodes (paper: 2).")
    n_gpus_per_node: int = Field(8, ge=1, description="GPUs per node (paper: 8).")
    total_training_steps: int | None = Field(470, ge=1, description="Training steps (paper: 470); None = epochs.")
    total_epochs: int = Field(1, ge=1, description="Epochs when total_training_steps is None.")
    save_freq: int = Field(50, description="Checkpoint every N steps (reference: 50).")
    test_freq: int = Field(10, description="Validate every N steps (reference: 10).")
    project: str = Field("envace", description="verl project name (MLflow experiment).")
    experiment: str = Field("envace_qwen3_8b", description="verl experiment name (MLflow run).")
    checkpoint_dir: str | None = Field(None, description="trainer.default_local_dir; None = verl's default.")
    max_checkpoints_kept: int | None = Field(
        2, ge=1, description="Newest actor checkpoints kept (trainer.max_actor_ckpt_to_keep; each holds fp32 weights "
                             "+ Adam, ~96 GB for Qwen3-8B); None = keep every save.")
    loggers: list[str] = Field(default_factory=lambda: ["console", "mlflow"], description="verl trainer.logger.")
    ray_address: str | None = Field(None, description="Ray cluster address; None = $RAY_ADDRESS.")
    python: str = Field("python", description="Python executable on the driver node.")
    forward_env: list[str] = Field(default_factory=list, description="Extra environment variables copied into every "
                                                                     "Ray worker when set (e.g. HF_TOKEN); the rest "
                                                                     "of this machine's environment stays here.")
    loop: LoopSettings = Field(default_factory=LoopSettings, description="The agent loop's envace: section.")
    overrides: list[str] = Field(default_factory=list, description="Extra raw Hydra overrides, appended last.")

    @field_validator("adv_estimator", mode="before")
    @classmethod
    def _refuse_moving_average(cls, v: Any) -> Any:
        if v in ("role_moving_average", "envace_role_moving_average"):
            raise ConfigError(f"adv_estimator={v}: the per-role moving-average baseline is state carried across "
                              "steps and checkpoints, which envace's verl trainer does not keep (it runs on the "
                              "embedded backend only); set adv_estimator=envace_role_grpo, or train with "
                              "envace train --backend embedded algo.advantage=role_moving_average",
                              field="adv_estimator", what=f"{v} on verl",
                              fix="adv_estimator=envace_role_grpo or --backend embedded")
        return v

    def token_cap(self) -> int:
        """Tokens per micro-batch per GPU for log-probs and the update (max_tokens_per_gpu, else max_model_len)."""
        return int(self.max_tokens_per_gpu or self.max_model_len)

    def micro_batching_mode(self) -> Literal["rows", "tokens"]:
        """`micro_batching` with auto resolved: rows with sdpa, tokens with remove-padding."""
        if self.micro_batching != "auto":
            return self.micro_batching
        return "tokens" if self.attn_implementation == "flash_attention_2" else "rows"

    @model_validator(mode="after")
    def _check(self) -> VerlLaunchConfig:
        total = self.train_batch_size * self.n
        gpus = self.nnodes * self.n_gpus_per_node
        if total % gpus:
            raise ConfigError(f"train_batch_size x n = {total} rows is not divisible by nnodes x n_gpus_per_node = "
                              f"{gpus}; verl needs whole rows per GPU: change train_batch_size or n")
        if self.train_batch_size % self.ppo_mini_batches:
            raise ConfigError(f"ppo_mini_batches = {self.ppo_mini_batches} does not divide train_batch_size = "
                              f"{self.train_batch_size}; verl's actor.ppo_mini_batch_size is train_batch_size / "
                              "ppo_mini_batches prompts: pick a divisor")
        if self.loop.ppo_mini_batches not in (1, self.ppo_mini_batches):
            raise ConfigError(f"loop.ppo_mini_batches = {self.loop.ppo_mini_batches} differs from ppo_mini_batches = "
                              f"{self.ppo_mini_batches}; set only the top-level ppo_mini_batches")
        if self.loop.policy not in ("shared", self.policy):
            raise ConfigError(f"loop.policy = {self.loop.policy} differs from policy = {self.policy}; set only the "
                              "top-level policy")
        if self.max_prompt_length > self.rollout_prompt_length:
            raise ConfigError(f"max_prompt_length {self.max_prompt_length} > rollout_prompt_length "
                              f"{self.rollout_prompt_length}; a first prompt must fit a role call")
        if self.max_tokens_per_gpu is not None and self.max_tokens_per_gpu < self.max_model_len:
            raise ConfigError(f"max_tokens_per_gpu {self.max_tokens_per_gpu} < max_model_len {self.max_model_len}: "
                              "verl's dynamic batch size needs every row to fit one micro-batch; raise it")
        bad = [n for n in self.memory.rows if not 1 <= n <= self.max_model_len]
        if bad:
            raise ConfigError(f"memory.rows holds {bad}: a row has 1 to max_model_len = {self.max_model_len} tokens; "
                              "fix memory.rows")
        if self.micro_batching == "tokens" and self.attn_implementation == "sdpa":
            raise ConfigError("micro_batching=tokens with attn_implementation=sdpa: verl caps real tokens but pads "
                              "every row to the micro-batch's longest ({15000, 3000, 1000, 1000} = 60000 padded "
                              "tokens under a 20000 cap); set micro_batching=rows, or flash_attention_2 "
                              "(remove-padding, docs/gpu.md)")
        if self.policy == "per_role" and self.rollout != "vllm":
            raise ConfigError(f"policy=per_role runs its Rehearse servers on vLLM; rollout is {self.rollout!r}: set "
                              "rollout=vllm (see envace/trainers/verl/rollout_names.py)")
        if self.rollout_prompt_length + 1 > self.max_model_len:
            raise ConfigError(f"rollout_prompt_length {self.rollout_prompt_length} leaves no room to generate in "
                              f"max_model_len {self.max_model_len}; raise max_model_len")
        return self


def per_role_resources(cfg: VerlLaunchConfig) -> str:
    """What `policy=per_role` costs on the cluster (printed by the dry run; docs/gpu.md, 'Per-role policy')."""
    pool = cfg.nnodes * cfg.n_gpus_per_node
    return (f"policy=per_role: the Rehearse actor gets its own pool of {cfg.nnodes} x {cfg.n_gpus_per_node} = {pool} "
            f"GPUs (FSDP actor + vLLM replicas + weight sync) beside verl's; the run needs {2 * pool} GPUs")
