"""Configs of the embedded trainers: `envace sft` (SFTConfig) and `envace train` (TrainConfig).

Defaults are the embedded default: the tiny model on the built-in tool world, sized so SFT + RL fit in
a few minutes on 2 CPU cores. Paper-scale values are noted in the field descriptions.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from envace.config import BaseConfig, ConfigError, RolloutConfig
from envace.data.config import DataConfig
from envace.engines.slots import ModelSlot
from envace.tracking.config import TrackingConfig
from envace.trainers.unscored_guard import UnscoredGuardConfig

ECHO_COEF_RANGE = (0.0, 1.0)  # algo.echo_coef: 0 = off; docs/rollout.md names the values swept (0.01-0.1)


class AlgoConfig(BaseConfig):
    advantage: str = Field("role_grpo", description="Advantage estimator, a name in envace.algos.ADVANTAGES: "
                                                    "role_grpo (EnvACE), grpo, or role_moving_average (R minus "
                                                    "a per-role moving average of earlier steps' mean reward, "
                                                    "carried across steps and checkpoints).")
    baseline_decay: float = Field(0.9, ge=0, lt=1, allow_inf_nan=False,
                                  description="algo.advantage=role_moving_average: weight of the earlier steps' "
                                              "average in b <- decay*b + (1-decay)*step mean, per role, in [0, 1) "
                                              "(0 = the previous step's mean; the first step uses its own mean).")
    weighting: Literal["per_output", "per_trajectory"] = Field(
        "per_output", description="Role baseline weighting (reference code: per_output).")
    norm_std: bool = Field(False, description="Divide advantages by the group std (paper: off).")
    loss: str = Field("ppo_clip",
                      description="Policy loss, a name in envace.algos.POLICY_LOSSES (ppo_clip, vanilla_pg).")
    clip_low: float = Field(0.2, gt=0, lt=1, description="PPO clip epsilon (low).")
    clip_high: float = Field(0.2, gt=0, description="PPO clip epsilon (high).")
    dual_clip_c: float = Field(3.0, gt=1, description="Dual-clip constant c (> 1).")
    agg: str = Field("token-mean",
                     description="Loss aggregation, verl's names with verl's meaning (envace.algos.AGGREGATIONS): "
                                 "token-mean (every loss token of the mini-batch alike; EnvACE's setting), "
                                 "seq-mean-token-mean (per-row mean, then mean over rows: what the reference's "
                                 "micro-batch of 1 amounts to), seq-mean-token-sum. Unscored rows count nowhere.")
    empty_output_penalty: float = Field(0.0, ge=0, description="Subtracted from the reward of a row whose generated "
                                                               "text is empty, before the advantage (reference: 0.1, "
                                                               "on there; 0 = off).")
    use_kl: bool = Field(False, description="KL to the frozen reference (paper: on at 1e-4; reference script: off).")
    kl_coef: float = Field(1e-4, ge=0, description="KL coefficient.")
    kl_kind: str = Field("low_var_kl",
                         description="KL estimator, a name in envace.algos.KL_ESTIMATORS (low_var_kl, kl, ...).")
    entropy_coef: float = Field(0.0, ge=0, description="Entropy bonus coefficient.")
    ppo_epochs: int = Field(1, ge=1, description="Passes over each rollout batch (verl ppo_epochs, "
                                                 "TRL num_iterations; paper: 1).")
    ppo_mini_batches: int = Field(1, ge=1, description="Optimizer steps per epoch: the batch is shuffled and split "
                                                       "into this many mini-batches (paper: 1).")
    pack: Literal["auto", "prefix", "tree", "chain", "off"] = Field(
        "prefix", description="Share prompt prefixes in the update (same loss, fewer tokens): a task's common "
                              "prefix run once with the KV cache and its trajectories continuing it, a task's rows "
                              "as one prefix tree, a trajectory's extending calls as one sequence, or off; auto "
                              "picks, per task, the cheaper of prefix and tree (envace.trainers.packing).")
    echo_coef: float = Field(0.0, description="Echo arm (rollout.mode=env only): weight of the cross-entropy "
                                              "on each executed call's real answer as a Rehearse target under "
                                              "the Rehearse prompt rehearse mode would build, token-mean over "
                                              "those tokens, added to the GRPO loss (envace.trainers.arms.echo); in "
                                              "[0, 1], 0 = off, swept at 0.01, 0.05, 0.1.")
    rehearse_loss_weight: float = Field(1.0, ge=0, allow_inf_nan=False,
                                        description="Weight of each Rehearse row in the loss and in the token- "
                                                    "(row-) mean's denominator; 0 = out of the update, as if never "
                                                    "generated (EnvACE: 1; per_role: only 0 changes anything).")
    grad_noise_scale: bool = Field(True, description="Log the gradient noise scale tr(Sigma)/|G|^2, in prompts, "
                                                     "from a random split-half of each step's prompts "
                                                     "(one gradient copy per micro-batch).")

    @field_validator("echo_coef")
    @classmethod
    def _check_echo_coef(cls, v: float) -> float:
        lo, hi = ECHO_COEF_RANGE
        if not (lo <= v <= hi):  # also refuses NaN
            raise ConfigError(f"algo.echo_coef={v} is outside [{lo:g}, {hi:g}] (the echo loss's weight beside the "
                              f"GRPO loss; 0 = off, swept at 0.01-0.1); set algo.echo_coef between {lo:g} and {hi:g}",
                              field="algo.echo_coef", what=f"echo_coef {v} outside [{lo:g}, {hi:g}]",
                              fix=f"a value in [{lo:g}, {hi:g}], e.g. 0.05")
        return v

    @model_validator(mode="after")
    def _check_names(self) -> AlgoConfig:
        # The valid names are whatever the algos registries hold (a newly registered estimator is usable
        # at once); imported here, not at module top, so this module imports without torch.
        from envace.algos import ADVANTAGES, AGGREGATIONS, KL_ESTIMATORS, POLICY_LOSSES

        for key, registry in (("advantage", ADVANTAGES), ("loss", POLICY_LOSSES), ("agg", AGGREGATIONS),
                              ("kl_kind", KL_ESTIMATORS)):
            name = getattr(self, key)
            if name not in registry:
                valid = ", ".join(registry.names())
                raise ConfigError(f"algo.{key}={name!r} is not a registered {registry.family}; valid names: {valid}; "
                                  f"set algo.{key} to one of them", field=f"algo.{key}", what=f"unknown name {name!r}",
                                  fix=f"one of: {valid}")
        return self

    @model_validator(mode="after")
    def _check_reuse(self) -> AlgoConfig:
        if self.loss == "vanilla_pg" and (self.ppo_epochs > 1 or self.ppo_mini_batches > 1):
            raise ConfigError(
                f"algo.loss='vanilla_pg' has no importance ratio, so algo.ppo_epochs={self.ppo_epochs} / "
                f"algo.ppo_mini_batches={self.ppo_mini_batches} would train on stale samples uncorrected; "
                "use algo.loss=ppo_clip or set both to 1")
        return self


class OptimConfig(BaseConfig):
    lr: float = Field(1e-4, gt=0, description="AdamW learning rate (paper: 1e-6 for Qwen3-8B).")
    weight_decay: float = Field(0.01, ge=0, description="AdamW weight decay.")
    grad_clip: float = Field(1.0, gt=0, description="Max global grad norm.")
    grad_clip_per_role: bool = Field(False, description="Shared policy: clip each role's gradient to grad_clip on its "
                                                        "own, then add them (the per-role arm's clipping budget; "
                                                        "the one AdamW stays shared); off = one clip over both.")
    betas: tuple[float, float] = Field((0.9, 0.999), description="AdamW betas.")
    warmup_steps: int = Field(0, ge=0, description="RL steps of linear learning-rate warm-up from lr/warmup_steps "
                                                   "to lr (0 = constant lr); a function of the step, "
                                                   "so resume is exact.")


class DynamicSamplingConfig(BaseConfig):
    """DAPO dynamic sampling: off by default, as in the paper's GRPO (a step's cost then varies)."""

    enabled: bool = Field(False, description="Drop groups whose K rewards are all equal (no GRPO signal) and refill "
                                             "the step with further prompts (DAPO).")
    max_refill_rounds: int = Field(3, ge=0, description="Refill rounds per step at most; then train on the "
                                                        "informative groups found.")


class GroundedConfig(BaseConfig):
    """The grounded arm (envace.trainers.arms.grounded): EnvACE where a seeded share of the rehearsed calls is also
    executed for real, after the episode, and their Rehearse rows get a fidelity reward beside the task reward."""

    fraction: float = Field(0.0, ge=0, le=1, description="Share of rehearsed calls grounded, each chosen with this "
                                                         "probability, seeded by (seed, step, prompt, sample, call) "
                                                         "(0 = off; rollout.mode=rehearse, data.source=world).")
    metric: Literal["leaf_f1", "exact"] = Field("leaf_f1", description="Fidelity of a grounded call: leaf F1 or exact "
                                                                      "match of the rehearsed vs the real answer "
                                                                      "(worldbench's scores, envace.fidelity).")
    coef: float = Field(1.0, ge=0, description="w in Rehearse-row reward = task reward + w x fidelity (grounded "
                                               "calls only).")


class ToyRewardConfig(BaseConfig):
    """A diagnostic reward (reward=toy) that a briefly SFT'd model earns sometimes: proves the loop can climb."""

    kind: Literal["first_call_tool", "reply_word"] = Field(
        "first_call_tool", description="1 when the first Act call names `target`, or when a final reply contains the "
                                       "word `target`; else 0.")
    target: str = Field("get_balance", min_length=1, description="Tool name or word the toy reward looks for.")


class TrainConfig(BaseConfig):
    """`envace train`: role-wise GRPO (EnvACE) and its baselines on the embedded backend."""

    model: str = Field(..., description="Policy model dir (tiny model, SFT checkpoint or a real HF dir).")
    policy: Literal["shared", "per_role"] = Field("shared", description="One model for both roles, or one per role.")
    out_dir: str = Field("runs/train", description="Run directory: checkpoints, config, logs.")
    steps: int = Field(40, ge=1, description="Training steps (one optimizer step each; paper: 470).")
    prompts_per_step: int = Field(8, ge=1, description="Prompts x per step (paper: 16).")
    k: int = Field(8, ge=2, description="Trajectories per prompt (group size; paper: 4).")
    micro_batch: int = Field(32, ge=1, description="Sequences per forward/backward (packed rows, length-sorted; "
                                                   "gradient accumulation).")
    micro_batch_tokens: int | None = Field(2048, ge=1,
                                           description="Padded tokens per forward/backward at most (None = no cap); "
                                                       "small caps waste less on padding on CPU.")
    save_every: int = Field(10, ge=1, description="Checkpoint every N steps (and at the end).")
    keep_checkpoints: int = Field(2, ge=1, description="Checkpoints kept on disk.")
    seed: int = Field(0, description="Run seed; sampling seeds derive from (seed, step, prompt, sample, role).")
    device: str | None = Field(None, description="cpu | cuda | None (cuda when available).")
    threads: int | None = Field(None, ge=1, description="torch CPU threads (None = all cores).")
    reward: Literal["checklist_rule", "checklist_llm", "env_state", "toy"] = Field(
        "checklist_rule", description="Reward source (toy: the diagnostic reward of `toy_reward`).")
    toy_reward: ToyRewardConfig = Field(default_factory=ToyRewardConfig, description="Used when reward=toy.")
    judge: ModelSlot | None = Field(None, description="LLM checklist judge (reward=checklist_llm), built once per run: "
                                    "judge.model_dir=DIR (served in-process) or judge.base_url=URL judge.model=NAME "
                                    "[judge.api_key_env=VAR]; judge.temperature samples verdicts (reference: 0.6), "
                                    "judge.max_tokens caps a verdict.")
    judge_attempts: int = Field(5, ge=1, description="Judge attempts per checklist item before the trajectory is a "
                                                     "judge error, left out of the baselines (reference: 5).")
    judge_retry_delay_s: float = Field(1.0, ge=0, description="Wait before judge retry k: delay * 2^(k-1), at most "
                                                              "30 s (0 for a local judge: waiting does not help it).")
    simulator: ModelSlot | None = Field(None, description="Frozen simulator of rollout.mode=simulator, any model slot: "
                                        "simulator.model_dir=DIR (in-process, with its own tokenizer) or "
                                        "simulator.base_url=URL simulator.model=NAME [simulator.api_key_env=VAR] (an "
                                        "OpenAI-compatible chat endpoint: a GTM- or Simia-style simulator). It is "
                                        "sent the Rehearse prompt and sampled with rollout.rehearse; "
                                        "rollout.simulator_model=DIR is the shorthand for a local dir.")
    placebo_simulator: Literal["ack"] | None = Field(
        None, description="Diagnostic (rollout.mode=simulator): a placebo simulator that answers every call with "
                          "{\"status\": \"ok\"} "
                          "(envace.rollout.placebo), a probe of whether the tasks can tell world models apart.")
    flip_advantage_sign: bool = Field(False, description="Diagnostic: negate every advantage; a working loop then "
                                                         "drives the reward down.")
    dynamic_sampling: DynamicSamplingConfig = Field(default_factory=DynamicSamplingConfig,
                                                    description="Drop zero-variance groups and refill (DAPO).")
    unscored: UnscoredGuardConfig = Field(default_factory=UnscoredGuardConfig,
                                          description="Stop the run when the reward judge leaves most episodes "
                                                      "unscored for several steps in a row (a dead judge).")
    shadow_monitor: bool | None = Field(None, description="Replay each rehearsed trajectory's Act calls in the real "
                                                          "world (never shown to the policy, never rewarded) and log "
                                                          "rehearsed vs real reward; None = on for world tasks in "
                                                          "rehearse/simulator mode.")
    arms: list[str] = Field(default_factory=list, description="Further training arms to run, names registered in "
                                                              "envace.trainers.arms.ARMS (docs/extending.md); the "
                                                              "built-in arms keep their own switches "
                                                              "(dynamic_sampling.enabled, algo.echo_coef, "
                                                              "flip_advantage_sign, grounded.fraction, "
                                                              "shadow_monitor). `active_arms` lists all that run.")
    data: DataConfig = Field(default_factory=DataConfig, description="Training tasks.")
    rollout: RolloutConfig = Field(default_factory=RolloutConfig, description="Rollout mode, role sampling, limits.")
    algo: AlgoConfig = Field(default_factory=AlgoConfig, description="Advantage, loss, KL.")
    grounded: GroundedConfig = Field(default_factory=GroundedConfig,
                                     description="Grounded rehearsal: a fidelity reward on a share of the rehearsed "
                                                 "calls (fraction 0 = off).")
    optim: OptimConfig = Field(default_factory=OptimConfig, description="Optimizer.")
    tracking: TrackingConfig = Field(default_factory=TrackingConfig, description="MLflow + trajectory store.")
    progress: bool = Field(True, description="Show a progress bar.")

    @model_validator(mode="after")
    def _check(self) -> TrainConfig:
        if self.simulator is not None and self.rollout.simulator_model:
            raise ConfigError(f"both simulator ({self.simulator.label()}) and rollout.simulator_model "
                              f"({self.rollout.simulator_model}) are set; keep one (simulator=null or "
                              "rollout.simulator_model=null)", field="simulator")
        if self.placebo_simulator is not None and (self.rollout.mode != "simulator" or self.simulator_slot):
            raise ConfigError(f"placebo_simulator={self.placebo_simulator!r} plays the frozen simulator: it needs "
                              f"rollout.mode=simulator and no other simulator (rollout.mode={self.rollout.mode!r}"
                              f"{', simulator ' + self.simulator_slot.label() if self.simulator_slot else ''}); set "
                              "placebo_simulator=null or rollout.mode=simulator rollout.simulator_model=null",
                              field="placebo_simulator")
        if self.rollout.mode == "simulator" and self.simulator_slot is None and self.placebo_simulator is None:
            raise ConfigError("rollout.mode='simulator' needs a frozen simulator: rollout.simulator_model=DIR, "
                              "simulator.model_dir=DIR, or simulator.base_url=URL simulator.model=NAME",
                              field="simulator")
        if self.rollout.mode != "simulator" and self.simulator_slot is not None:
            raise ConfigError(f"a simulator is set but rollout.mode={self.rollout.mode!r} never asks it; set "
                              "rollout.mode=simulator or remove the simulator", field="simulator")
        if self.rollout.simulator_prompt != "rehearse" and self.rollout.mode != "simulator":
            raise ConfigError(f"rollout.simulator_prompt={self.rollout.simulator_prompt!r} prompts the frozen "
                              f"simulator, but rollout.mode={self.rollout.mode!r} has none; set rollout.mode=simulator "
                              "or rollout.simulator_prompt=rehearse", field="rollout.simulator_prompt")
        if self.reward == "env_state" and self.rollout.mode == "rehearse":
            raise ConfigError("reward='env_state' reads a real environment, which rehearse mode never touches; "
                              "use reward=checklist_rule (or rollout.mode=env)")
        if self.reward == "checklist_llm" and self.judge is None:
            raise ConfigError("reward='checklist_llm' needs a judge: set judge.model_dir=DIR (a local model served "
                              "in-process) or judge.base_url=URL judge.model=NAME (an OpenAI-compatible endpoint)")
        if self.judge is not None and self.reward != "checklist_llm":
            raise ConfigError(f"judge is set but reward={self.reward!r} never asks it; set reward=checklist_llm "
                              "or judge=null")
        if self.algo.echo_coef > 0 and self.rollout.mode != "env":
            raise ConfigError(f"algo.echo_coef={self.algo.echo_coef} trains Rehearse on the real environment's "
                              f"answers, which only rollout.mode=env has (rollout.mode={self.rollout.mode!r}); set "
                              "rollout.mode=env or algo.echo_coef=0", field="algo.echo_coef",
                              what=f"echo_coef > 0 with rollout.mode={self.rollout.mode!r}",
                              fix="rollout.mode=env or algo.echo_coef=0")
        if self.grounded.fraction > 0 and (self.rollout.mode != "rehearse" or self.data.source != "world"):
            raise ConfigError(f"grounded.fraction={self.grounded.fraction} rewards rehearsed answers against the "
                              f"built-in world's real ones, but rollout.mode={self.rollout.mode!r}, data.source="
                              f"{self.data.source!r}; it needs rollout.mode=rehearse and data.source=world (or set "
                              "grounded.fraction=0)", field="grounded.fraction",
                              what=f"grounded.fraction > 0 with mode {self.rollout.mode!r}, source "
                                   f"{self.data.source!r}", fix="rollout.mode=rehearse data.source=world")
        if self.arms:
            from envace.trainers.arms import check_arm_names  # the registry, without loading any arm

            problem = check_arm_names(self.arms)
            if problem is not None:
                raise ConfigError(problem, field="arms")
        if self.shadow_monitor and (self.data.source != "world" or self.rollout.mode == "env"):
            raise ConfigError(f"shadow_monitor=true replays calls in the built-in world, but data.source="
                              f"{self.data.source!r}, rollout.mode={self.rollout.mode!r}; it needs data.source=world "
                              "and a rehearsed mode (rehearse or simulator): set shadow_monitor=null")
        return self

    @property
    def simulator_slot(self) -> ModelSlot | None:
        """The frozen simulator's slot (`simulator`, or the `rollout.simulator_model` shorthand); None: none."""
        if self.simulator is not None:
            return self.simulator
        return ModelSlot(model_dir=self.rollout.simulator_model) if self.rollout.simulator_model else None

    @property
    def active_arms(self) -> list[str]:
        """Every training arm this config runs, in hook order (envace.trainers.arms.configured_arms)."""
        from envace.trainers.arms import configured_arms

        return configured_arms(self)

    @property
    def shadow_enabled(self) -> bool:
        """The resolved shadow-monitor switch (None = on where it can run)."""
        if self.shadow_monitor is not None:
            return self.shadow_monitor
        return self.data.source == "world" and self.rollout.mode != "env"


class SFTConfig(BaseConfig):
    """`envace sft`: supervised cold start on oracle demonstrations of both roles."""

    model: str = Field(..., description="Model dir to start from (e.g. the output of `envace model init`).")
    out_dir: str = Field("runs/sft", description="Output dir; the final model is saved in <out_dir>/model.")
    data: DataConfig = Field(default_factory=DataConfig, description="Demonstration tasks.")
    act_fraction: float = Field(0.5, ge=0, le=1, description="Probability that a batch is Act samples (else Rehearse).")
    pack_act: bool = Field(True, description="One Act sample per task: the whole gold conversation, loss on "
                                             "every assistant message (else one sample per message).")
    batch_size: int = Field(16, ge=1, description="Sequences per step.")
    length_groups: int = Field(1, ge=1, description="Length-grouped batches: draw this many batches' samples of one "
                                                    "role at once (each uniformly, with replacement), sort them by "
                                                    "length and cut them into batches, used in random order, so a "
                                                    "batch pads less (1 = every batch drawn on its own).")
    share_prefix: bool = Field(True, description="Run a batch's common prefix once (KV cache) and its sequences in "
                                                 "length-sorted passes, the output layer at target positions only "
                                                 "(the same loss as one padded forward, fewer tokens); false: one "
                                                 "padded forward with full logits.")
    prefix_groups: bool = Field(True, description="With share_prefix: sequences of a batch that go on sharing a "
                                                  "longer prefix (a domain's system prompt and tools) get a trunk "
                                                  "of their own where it saves tokens, and thread shards keep them "
                                                  "together; false: one trunk, the batch's common prefix.")
    steps: int | None = Field(None, ge=1, description="Optimizer steps (None: run for time_budget_s).")
    time_budget_s: float = Field(240.0, gt=0, description="Wall-clock budget when steps is None.")
    lr: float = Field(2e-3, gt=0, description="Peak learning rate (cosine decay to 10%).")
    warmup_steps: int = Field(30, ge=0, description="Linear warm-up steps.")
    weight_decay: float = Field(0.01, ge=0, description="AdamW weight decay.")
    few_shot: bool = Field(True, description="Rehearse samples include the task's reference (call, response) pairs.")
    error_demos: float = Field(0.0, ge=0, le=1, description="Share of gold calls that also get a wrong twin (an "
                                                            "unknown id, an infeasible amount) answered by the "
                                                            "real tool world, so Rehearse sees the world say no "
                                                            "(tool-world tasks only; 0 = gold responses only).")
    tts_prompts: float = Field(0.0, ge=0, le=1, description="Share of the demonstration tasks that also teach "
                                                            "test-time rehearsal's prompts: a review, a memory and "
                                                            "the gold Act under a memory block "
                                                            "(envace.tts.sft_data; training tasks only; 0 = off).")
    rehearse_style: Literal["history", "compact", "full"] = Field(
        "history", description="Rehearse prompt style; match the RL run's rollout.rehearse_style.")
    max_len: int = Field(1024, ge=32, description="Drop samples longer than this (tokens).")
    seed: int = Field(0, description="Seed.")
    device: str | None = Field(None, description="cpu | cuda | None (auto).")
    threads: int | None = Field(None, ge=1, description="torch CPU threads.")
    shards: int | None = Field(None, ge=1, description="CPU: cut each batch into this many shards, each run "
                                                       "forward and backward in its own Python thread at one "
                                                       "torch thread, gradients summed (the same step up to float "
                                                       "rounding; envace.thread_shards). None: one per "
                                                       "torch thread of this run; 1: the plain single-pass step. "
                                                       "Ignored on GPU.")
    fused_norm: bool = Field(True, description="CPU, float32: the model's RMSNorms run with a hand-written "
                                               "backward (the same forward bit for bit, gradients equal to "
                                               "float rounding; envace.models.rms_norm); false: transformers' "
                                               "norms, autograd's backward.")
    progress: bool = Field(True, description="Show a progress bar.")

    @model_validator(mode="after")
    def _tts_prompts_train_split(self) -> SFTConfig:
        if self.tts_prompts > 0 and self.data.source == "world" and self.data.split != "train":
            raise ConfigError(f"tts_prompts={self.tts_prompts} builds rehearsal examples from training tasks only, "
                              f"but data.split={self.data.split!r}; set data.split=train or tts_prompts=0",
                              field="data.split", what=f"data.split={self.data.split!r} with tts_prompts > 0",
                              fix="data.split=train (or tts_prompts=0)")
        return self
