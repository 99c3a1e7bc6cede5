"""The embedded trainer: EnvACE (role-wise GRPO with world rehearsal) and its baselines in a plain
torch loop, on CPU or one CUDA device.

Per step: sample `prompts_per_step` tasks (seeded by step), roll out K trajectories each (mode rehearse |
env | simulator), score them, build one row per role call, compute advantages grouped by (prompt, role),
and update each model (`update_models`). `policy=shared` trains one model on both roles' rows;
`policy=per_role` keeps two models, each updated only from its own role's rows. Checkpoints every
`save_every` steps; a restarted run resumes from the newest intact checkpoint at the next step (a damaged
newer one is skipped with a warning: `envace.trainers.checkpoint.latest_checkpoint`). One process writes a
run folder at a time (`run_lock`); a copied folder starts its own MLflow and store runs
(`own_resume_meta`); a checkpoint whose MLflow upload a kill cut short is logged again on resume.
Options around that loop: dynamic sampling (`dynamic_sampling`, DAPO: zero-signal groups dropped and
refilled), linear lr warm-up (`optim.warmup_steps`), the rehearsal exploitation monitor
(`shadow_monitor`: rehearsed vs real reward, never seen by the policy) and the diagnostics `reward=toy`
and `flip_advantage_sign` (the loop must climb, or with the sign flipped descend, a toy reward).
Two world-model arms ride on the same loop: `algo.echo_coef` > 0 (env mode: cross-entropy on the real answers
as Rehearse targets, extra rows of the update, envace.trainers.echo) and `grounded.fraction` > 0 (rehearse
mode: a fidelity reward on the Rehearse rows of a seeded share of calls, replayed in the real world after the
episode, envace.trainers.grounded). `algo.advantage=role_moving_average` keeps a per-role moving average of the
mean reward across steps (`envace.algos.RoleMovingBaseline`, decay `algo.baseline_decay`): read by each step's
advantages, then moved by its rewards, saved in every checkpoint's meta.json and restored on resume.

Departures from the paper / reference code: the old log-probs are the sampling engine's own (the run
is on-policy with one PPO epoch, so verl's recomputation would give the same numbers — a test checks
the parity); the reference code's random row duplication to pad batches is not reproduced.
"""

from __future__ import annotations

import copy
import random
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from envace.algos import RoleMovingBaseline, carries_baseline, get_advantage_fn
from envace.cpu_threads import apply_thread_policy
from envace.data.tasks import load_tasks
from envace.engines.factory import engine_name, make_engine
from envace.models.loading import load_policy, pick_device
from envace.rollout import derive_seed, run_rollout
from envace.rollout.placebo import PlaceboSimulator
from envace.tracking.gitinfo import git_commit
from envace.trainers.checkpoint import (
    Checkpoint,
    latest_checkpoint,
    load_optimizer_states,
    own_resume_meta,
    save_checkpoint,
)
from envace.trainers.config import TrainConfig
from envace.trainers.dynamic_sampling import SampledBatch, informative_groups, sample_with_refill
from envace.trainers.echo import echo_metrics, echo_rows
from envace.trainers.grounded import Grounding, apply_fidelity_reward, ground
from envace.trainers.metrics import step_metrics
from envace.trainers.prompt_style import warn_on_style_mismatch
from envace.trainers.rewarding import RewardScorer
from envace.trainers.run_lock import run_lock
from envace.trainers.run_tracker import RunTracker
from envace.trainers.schedule import lr_at, set_lr
from envace.trainers.shadow import shadow_metrics, shadow_replay
from envace.trainers.train_rows import TrainRow, assign_advantages, build_rows
from envace.trainers.unscored_guard import UnscoredGuard
from envace.trainers.update import policy_update, role_rows
from envace.types import Mode, Role, Task, Trajectory


@dataclass
class TrainResult:
    out_dir: Path
    last_step: int
    history: list[dict[str, float]] = field(default_factory=list)
    checkpoint: Path | None = None
    mlflow_run_id: str | None = None


class _Policy:
    """The trained model(s): one shared model, or one per role."""

    def __init__(self, cfg: TrainConfig, model_dirs: dict[str, Path], device: torch.device):
        self.names = ["policy"] if cfg.policy == "shared" else ["act", "rehearse"]
        self.models: dict[str, Any] = {}
        self.tokenizer = None
        for name in self.names:
            model, tok = load_policy(model_dirs[name], device=device)
            self.models[name] = model
            self.tokenizer = self.tokenizer or tok
        self.engines = {n: make_engine(m, self.tokenizer, device=device) for n, m in self.models.items()}
        self.optimizers = {n: torch.optim.AdamW(m.parameters(), lr=cfg.optim.lr, betas=cfg.optim.betas,
                                                weight_decay=cfg.optim.weight_decay)
                           for n, m in self.models.items()}
        self.refs = ({n: _frozen_copy(m) for n, m in self.models.items()} if cfg.algo.use_kl else {})

    rehearse_override = None  # an engine playing Rehearse instead of the policy (train's rehearse_engine)

    def rollout_policy(self):
        if self.rehearse_override is not None:
            act = self.engines["policy" if len(self.names) == 1 else "act"]
            return {Role.ACT: act, Role.REHEARSE: self.rehearse_override}
        if len(self.names) == 1:
            return self.engines["policy"]
        return {Role.ACT: self.engines["act"], Role.REHEARSE: self.engines["rehearse"]}

    def rows_for(self, name: str, rows):
        return rows if name == "policy" else role_rows(rows, Role(name))


def update_models(policy: _Policy, rows, cfg: TrainConfig, step: int = 0, echo=None) -> dict:
    """`algo.ppo_epochs` x `algo.ppo_mini_batches` optimizer steps per model (one by default); with a
    per-role policy each model sees only its own role's rows. `step` seeds the mini-batch shuffle.
    `echo`: the echo arm's supervised Rehearse rows (weighted by `algo.echo_coef`)."""
    updates = {}
    for name in policy.names:
        mine = policy.rows_for(name, rows)
        my_echo = policy.rows_for(name, echo or [])
        if mine or (my_echo and cfg.algo.echo_coef > 0):
            updates[name] = policy_update(policy.models[name], policy.optimizers[name], mine, cfg.algo,
                                          pad_id=policy.tokenizer.pad_token_id, micro_batch=cfg.micro_batch,
                                          grad_clip=cfg.optim.grad_clip, ref_model=policy.refs.get(name),
                                          seed=derive_seed(cfg.seed, step, name, "mini_batches"),
                                          max_tokens=cfg.micro_batch_tokens,
                                          clip_per_role=cfg.optim.grad_clip_per_role and name == "policy",
                                          echo_rows=my_echo, echo_coef=cfg.algo.echo_coef)
    return updates


def _frozen_copy(model):
    ref = copy.deepcopy(model).eval()
    for p in ref.parameters():
        p.requires_grad_(False)
    return ref


def _initial_dirs(cfg: TrainConfig) -> dict[str, Path]:
    if cfg.policy == "shared":
        return {"policy": Path(cfg.model)}
    return {"act": Path(cfg.model), "rehearse": Path(cfg.model)}


def sample_step_tasks(pool: list[Task], cfg: TrainConfig, step: int) -> list[Task]:
    rng = random.Random(derive_seed(cfg.seed, step, "tasks"))
    return rng.sample(pool, min(cfg.prompts_per_step, len(pool)))


def rollout_step(pool: list[Task], cfg: TrainConfig, step: int, policy: _Policy, mode: Mode,
                 scorer: RewardScorer, env_factory, simulator) -> SampledBatch:
    """Roll out and score the step's groups; with dynamic sampling, refill until enough carry signal."""

    def rollout(tasks: list[Task], first_index: int, seed: int) -> list[Trajectory]:
        with torch.inference_mode():
            trajs = run_rollout(tasks, k=cfg.k, policy=policy.rollout_policy(), cfg=cfg.rollout, mode=mode,
                                env_factory=env_factory, simulator=simulator, step=step, seed=seed,
                                turn_gate=scorer.turn_gate, echo_prompts=cfg.algo.echo_coef > 0)
        for t in trajs:  # refill rounds continue the step's prompt numbering: groups stay distinct
            t.prompt_index += first_index
        scorer.score(trajs)
        return trajs

    tasks = sample_step_tasks(pool, cfg, step)
    ds = cfg.dynamic_sampling
    if ds.enabled:
        return sample_with_refill(pool, tasks, rollout, seed=cfg.seed, step=step,
                                  prompts_per_step=cfg.prompts_per_step, max_refill_rounds=ds.max_refill_rounds)
    trajs = rollout(tasks, 0, cfg.seed)
    return SampledBatch(kept=trajs, generated=trajs, groups_generated=len(tasks),
                        groups_informative=len(informative_groups(trajs)),
                        kept_prompt_indices=list(range(len(tasks))))


def flip_advantages(rows: list[TrainRow]) -> None:
    """Diagnostic (`flip_advantage_sign`): negate every advantage (on the rows' turns: a row is a view)."""
    for r in rows:
        r.advantage = -r.advantage


def step_rows(trajs: list[Trajectory], cfg: TrainConfig, step: int, tokenizer: Any,
              baseline: RoleMovingBaseline | None = None) -> tuple[list[TrainRow], list[TrainRow] | None,
                                                                   Grounding | None]:
    """The step's training rows with their advantages, the echo arm's supervised rows (None when off) and the
    grounded arm's grounding (None when off). Grounding runs here, after every episode of the step ended.
    `baseline`: the run's carried per-role average (`carried_baseline`), read and then moved by this step."""
    rows = build_rows(trajs, cfg.algo.empty_output_penalty)
    grounding = None
    if cfg.grounded.fraction > 0:
        grounding = ground(trajs, fraction=cfg.grounded.fraction, metric=cfg.grounded.metric, seed=cfg.seed,
                           step=step, env_factory=RewardScorer.env_factory())
        apply_fidelity_reward(rows, grounding, cfg.grounded.coef)
    assign_advantages(rows, cfg.algo.advantage, cfg.algo.weighting, cfg.algo.norm_std, baseline)
    if cfg.flip_advantage_sign:
        flip_advantages(rows)
    echo = echo_rows(trajs, tokenizer) if cfg.algo.echo_coef > 0 else None
    return rows, echo, grounding


BASELINE_META = "role_baseline"  # the checkpoint meta.json key of the carried per-role average


def carried_baseline(cfg: TrainConfig, resume: Checkpoint | None) -> RoleMovingBaseline | None:
    """The per-role moving average of an estimator that carries one across steps (None for the others),
    restored from the checkpoint the run resumes from."""
    if not carries_baseline(get_advantage_fn(cfg.algo.advantage)):
        return None
    baseline = RoleMovingBaseline(cfg.algo.baseline_decay)
    if resume is not None:
        state = resume.meta.get(BASELINE_META)
        if state is None:
            warnings.warn(f"{resume.path} holds no {BASELINE_META} (written with another algo.advantage than "
                          f"{cfg.algo.advantage}); the moving average restarts from step {resume.step + 1}'s batch "
                          "mean", stacklevel=2)
        else:
            baseline.load_state_dict(state, source=f"{resume.path / 'meta.json'} {BASELINE_META}")
    return baseline


def _shadow_metrics(trajs: list[Trajectory], scorer: RewardScorer) -> dict[str, float]:
    from envace.worlds.environment import WorldEnvironment

    results = [shadow_replay(t, scorer.reward_of, WorldEnvironment) for t in trajs]
    return shadow_metrics(trajs, results)


def frozen_simulator(cfg: TrainConfig, device: Any) -> Any:
    """The simulator mode's frozen engine from its slot: a local dir with its own tokenizer (its prompts are
    rendered by its own chat template), or an endpoint's chat API (`ChatTextEngine`)."""
    from envace.engines.slots import SlotKind
    from envace.rollout.chat_engine import ChatTextEngine

    slot = cfg.simulator_slot
    assert slot is not None  # TrainConfig checks simulator mode has one
    if slot.kind is SlotKind.ENDPOINT:
        return ChatTextEngine(slot.build_client("simulator"), name=f"endpoint:{slot.label()}")
    return slot.build_chat_model("simulator", device=str(device)).engine


def train(cfg: TrainConfig, *, rehearse_engine: Any = None) -> TrainResult:
    """Train under an exclusive lock on `cfg.out_dir` (one writer per run folder: envace.trainers.run_lock).
    `rehearse_engine` (diagnostics and tests): a callable (tokenizer, task pool) -> engine that plays Rehearse
    instead of the policy, e.g. envace.rollout.oracle.OracleRehearser; with policy=per_role the Act model's
    updates then see exactly what an env-mode run's would (the oracle-rehearsal invariant)."""
    with run_lock(cfg.out_dir):
        return _train(cfg, rehearse_engine)


def _train(cfg: TrainConfig, rehearse_engine: Any = None) -> TrainResult:
    out_dir = Path(cfg.out_dir)
    ckpt_root = out_dir / "checkpoints"
    out_dir.mkdir(parents=True, exist_ok=True)
    cfg.save_resolved(out_dir)
    apply_thread_policy(cfg.threads)
    device = torch.device(cfg.device) if cfg.device else pick_device()
    resume = latest_checkpoint(ckpt_root)
    dirs = _initial_dirs(cfg) if resume is None else {n: resume.model_dir(n) for n in _initial_dirs(cfg)}
    if resume is None and cfg.rollout.mode == "rehearse":
        warn_on_style_mismatch(cfg.model, cfg.rollout.rehearse_style)
    pool = load_tasks(cfg.data)  # before the model: a bad data file fails in a second, not after a load
    # the LLM judge (reward=checklist_llm) is built once per run, before the policy: a missing judge dir or
    # API-key variable fails at once
    scorer = RewardScorer.from_config(cfg, device=str(device))
    policy = _Policy(cfg, dirs, device)
    if rehearse_engine is not None:
        policy.rehearse_override = rehearse_engine(policy.tokenizer, pool)
    start = 0
    if resume is not None:
        load_optimizer_states(resume, policy.optimizers)
        start = resume.step
    mode = Mode(cfg.rollout.mode)
    simulator = None
    if mode is Mode.SIMULATOR:
        simulator = (PlaceboSimulator(policy.tokenizer, cfg.placebo_simulator) if cfg.placebo_simulator
                     else frozen_simulator(cfg, device))
    env_factory = scorer.env_factory() if mode is Mode.ENV else None
    tracker = RunTracker(cfg, resume_meta=own_resume_meta(resume.meta, out_dir) if resume else None)
    if resume is not None:  # a kill during its MLflow upload left it unrecorded (or its model version missing)
        tracker.ensure_checkpoint_logged(resume.path, final=resume.step == cfg.steps)
    tracker.log_engines({n: engine_name(e) for n, e in policy.engines.items()}
                        | ({"simulator": engine_name(simulator)} if simulator is not None else {})
                        | ({"judge": scorer.judge_label} if scorer.judge_label else {}))
    result = TrainResult(out_dir=out_dir, last_step=start, mlflow_run_id=tracker.mlflow_run_id)
    bar = _progress(cfg, start)
    guard = UnscoredGuard.from_config(cfg.unscored, scorer.judge_label or f"reward={cfg.reward}")
    baseline = carried_baseline(cfg, resume)
    try:
        for step in range(start + 1, cfg.steps + 1):
            t0 = time.perf_counter()
            batch = rollout_step(pool, cfg, step, policy, mode, scorer, env_factory, simulator)
            t_roll = time.perf_counter() - t0
            guard.observe(step, sum(t.reward is None for t in batch.generated), len(batch.generated))  # dead judge
            trajs = batch.kept
            shadow = _shadow_metrics(batch.generated, scorer) if cfg.shadow_enabled else {}
            rows, echo, grounding = step_rows(trajs, cfg, step, policy.tokenizer, baseline)
            lr = lr_at(step, cfg.optim)
            set_lr(policy.optimizers, lr)
            updates = update_models(policy, rows, cfg, step=step, echo=echo)
            metrics = step_metrics(trajs, rows, updates, t_roll, time.perf_counter() - t0,
                                   generated=batch.generated)
            metrics.update(echo_metrics(updates))
            if baseline is not None:
                metrics.update(baseline.metrics())
            if grounding is not None:
                metrics.update(grounding.metrics())
            metrics["optim/lr"] = lr
            if cfg.dynamic_sampling.enabled:
                metrics.update(batch.metrics())
            metrics.update(shadow)
            metrics.update(scorer.judge_metrics())  # judge calls of this step (scoring and shadow replay)
            result.history.append({"step": step, **metrics})
            tracker.log_step(step, metrics, batch.generated)
            result.last_step = step
            if step % cfg.save_every == 0 or step == cfg.steps:
                tracker.flush()
                result.checkpoint = save_checkpoint(
                    ckpt_root, step, policy.models, policy.tokenizer, policy.optimizers,
                    {"config": cfg.model_dump(mode="json"), "git_commit": git_commit(),
                     "mlflow_run_id": tracker.mlflow_run_id, "store_run_id": tracker.run_id, "lr": lr,
                     "out_dir": str(out_dir.resolve())}
                    | ({BASELINE_META: baseline.state_dict()} if baseline is not None else {}),
                    keep=cfg.keep_checkpoints)
                tracker.log_checkpoint(result.checkpoint, final=step == cfg.steps)  # MLflow lists every save
            if bar is not None:
                bar.update(1)
                bar.set_postfix(reward=f"{metrics.get('reward/mean', 0):.3f}", s=f"{metrics['time/step_s']:.1f}")
    finally:
        if bar is not None:
            bar.close()
        tracker.close()
    return result


def _progress(cfg: TrainConfig, start: int):
    if not cfg.progress:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=cfg.steps, initial=start, desc=f"train[{cfg.rollout.mode}]", unit="step")
