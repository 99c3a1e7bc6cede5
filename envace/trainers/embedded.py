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
Training arms ride on the loop as registered hooks (envace.trainers.arms: the protocol, the hook order and the
registry): each step calls every configured arm's hooks before the rollout, for the batch, on the rows before
and after their advantages, for extra update rows and for metrics, with no arm named in the loop. Built in:
dynamic sampling (`dynamic_sampling`, DAPO: zero-signal groups dropped and refilled), the rehearsal
exploitation monitor (`shadow_monitor`: rehearsed vs real reward, never seen by the policy), the diagnostic
`flip_advantage_sign` (with `reward=toy` the loop must climb, or with the sign flipped descend, a toy reward),
and two world-model arms: `algo.echo_coef` > 0 (env mode: cross-entropy on the real answers as Rehearse
targets, extra rows of the update) and `grounded.fraction` > 0 (rehearse mode: a fidelity reward on the
Rehearse rows of a seeded share of calls, replayed in the real world after the episode); `arms:` turns on any
other registered arm. Linear lr warm-up (`optim.warmup_steps`); `algo.advantage=role_moving_average` keeps a
per-role moving average of the mean reward across steps (`envace.algos.RoleMovingBaseline`, decay
`algo.baseline_decay`): read by each step's advantages, then moved by its rewards, saved in every checkpoint's
meta.json and restored on resume.

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
from envace.provenance.gitinfo import git_commit
from envace.rollout import derive_seed, run_rollout
from envace.rollout.placebo import PlaceboSimulator
from envace.trainers.arms.base import Arm, SampledBatch, StepContext, build_arms
from envace.trainers.arms.dynamic_sampling import informative_groups
from envace.trainers.checkpoint import (
    Checkpoint,
    latest_checkpoint,
    load_optimizer_states,
    own_resume_meta,
    save_checkpoint,
)
from envace.trainers.config import TrainConfig
from envace.trainers.metrics import step_metrics
from envace.trainers.prompt_style import warn_on_style_mismatch
from envace.trainers.rewarding import RewardScorer
from envace.trainers.run_lock import run_lock
from envace.trainers.run_tracker import RunTracker
from envace.trainers.schedule import lr_at, set_lr
from envace.trainers.train_rows import ExtraRows, TrainRow, assign_advantages, build_rows
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


def update_models(policy: _Policy, rows, cfg: TrainConfig, step: int = 0,
                  extra: list[ExtraRows] | None = None) -> dict:
    """`algo.ppo_epochs` x `algo.ppo_mini_batches` optimizer steps per model (one by default); with a
    per-role policy each model sees only its own role's rows. `step` seeds the mini-batch shuffle.
    `extra`: the arms' supervised row sets (each weighted by its `coef`; per role, like the policy rows)."""
    updates = {}
    for name in policy.names:
        mine = policy.rows_for(name, rows)
        my_extra = [ExtraRows(s.name, policy.rows_for(name, s.rows), s.coef, s.role) for s in extra or []]
        if mine or any(s.rows and s.coef > 0 for s in my_extra):
            updates[name] = policy_update(policy.models[name], policy.optimizers[name], mine, cfg.algo,
                                          pad_id=policy.tokenizer.pad_token_id, micro_batch=cfg.micro_batch,
                                          grad_clip=cfg.optim.grad_clip, ref_model=policy.refs.get(name),
                                          seed=derive_seed(cfg.seed, step, name, "mini_batches"),
                                          max_tokens=cfg.micro_batch_tokens,
                                          clip_per_role=cfg.optim.grad_clip_per_role and name == "policy",
                                          extra=my_extra)
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
                 scorer: RewardScorer, env_factory, simulator, arms: dict[str, Arm] | None = None,
                 ctx: StepContext | None = None) -> SampledBatch:
    """Roll out and score the step's groups: with the rollout options of every arm's `before_rollout`, and drawn
    by the arm that defines `sample` if one is on (dynamic sampling: refill until enough groups carry signal).
    `arms` default to `cfg`'s (`build_arms`)."""
    arms = build_arms(cfg) if arms is None else arms
    ctx = StepContext(cfg=cfg, step=step, scorer=scorer, pool=pool) if ctx is None else ctx
    options: dict[str, Any] = {}
    for name, arm in arms.items():
        for key, value in arm.before_rollout(ctx).items():
            if key in options and options[key] != value:
                raise ValueError(f"arm {name} sets the rollout option {key}={value!r}, another arm {options[key]!r}; "
                                 "turn one of them off")
            options[key] = value

    def rollout(tasks: list[Task], first_index: int, seed: int) -> list[Trajectory]:
        with torch.inference_mode():
            trajs = run_rollout(tasks, k=cfg.k, policy=policy.rollout_policy(), cfg=cfg.rollout, mode=mode,
                                env_factory=env_factory, simulator=simulator, step=step, seed=seed,
                                turn_gate=scorer.turn_gate, **options)
        for t in trajs:  # refill rounds continue the step's prompt numbering: groups stay distinct
            t.prompt_index += first_index
        scorer.score(trajs)
        return trajs

    tasks = sample_step_tasks(pool, cfg, step)
    for arm in arms.values():
        batch = arm.sample(ctx, tasks, rollout)
        if batch is not None:
            return batch
    trajs = rollout(tasks, 0, cfg.seed)
    return SampledBatch(kept=trajs, generated=trajs, groups_generated=len(tasks),
                        groups_informative=len(informative_groups(trajs)),
                        kept_prompt_indices=list(range(len(tasks))))


def step_rows(ctx: StepContext, arms: dict[str, Arm],
              baseline: RoleMovingBaseline | None = None) -> tuple[list[TrainRow], list[ExtraRows]]:
    """The step's training rows (of `ctx.trajectories`) with their advantages, and the arms' extra row sets.
    Every arm's `on_rows` runs before the advantages (after every episode of the step ended), its
    `on_advantages` after them. `baseline`: the run's carried per-role average (`carried_baseline`), read and
    then moved by this step."""
    cfg = ctx.cfg
    rows = build_rows(ctx.trajectories, cfg.algo.empty_output_penalty)
    for arm in arms.values():
        arm.on_rows(ctx, rows)
    assign_advantages(rows, cfg.algo.advantage, cfg.algo.weighting, cfg.algo.norm_std, baseline)
    for arm in arms.values():
        arm.on_advantages(ctx, rows)
    extra = [s for arm in arms.values() for s in arm.extra_rows(ctx)]
    return rows, extra


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
    arms = build_arms(cfg)
    try:
        for step in range(start + 1, cfg.steps + 1):
            t0 = time.perf_counter()
            ctx = StepContext(cfg=cfg, step=step, tokenizer=policy.tokenizer, scorer=scorer, pool=pool)
            batch = ctx.batch = rollout_step(pool, cfg, step, policy, mode, scorer, env_factory, simulator, arms, ctx)
            t_roll = time.perf_counter() - t0
            guard.observe(step, sum(t.reward is None for t in batch.generated), len(batch.generated))  # dead judge
            for arm in arms.values():
                arm.on_batch(ctx)
            rows, extra = step_rows(ctx, arms, baseline)
            lr = lr_at(step, cfg.optim)
            set_lr(policy.optimizers, lr)
            updates = update_models(policy, rows, cfg, step=step, extra=extra)
            metrics = step_metrics(batch.kept, rows, updates, t_roll, time.perf_counter() - t0,
                                   generated=batch.generated)
            if baseline is not None:
                metrics.update(baseline.metrics())
            metrics["optim/lr"] = lr
            for arm in arms.values():
                metrics.update(arm.metrics(ctx, updates))
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
