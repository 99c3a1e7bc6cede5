"""The training-arm protocol: what an arm of the embedded trainer may change in a step, and the step's records.

An arm is a subclass of `Arm` registered in `ARMS` (envace/trainers/arms/__init__.py holds the one list). The embedded
loop (envace.trainers.embedded) builds one instance per run of each configured arm (`build_arms`) and, every
step, calls each hook of every arm in this order (the arms in `configured_arms` order):

1. `before_rollout(ctx)` -> keyword options for `run_rollout` (echo: record the Rehearse prompts);
2. `sample(ctx, tasks, rollout)` -> the step's `SampledBatch`, or None to leave it to the plain rollout; at most
   one configured arm may define it (dynamic sampling);
3. `on_batch(ctx)`: the rolled-out, scored batch (`ctx.batch`), before any row exists (the shadow monitor);
4. `on_rows(ctx, rows)`: the step's rows before their advantages; an arm may change row rewards (grounded);
5. `on_advantages(ctx, rows)`: the rows after their advantages; an arm may change them (flip-sign);
6. `extra_rows(ctx)` -> supervised row sets (`ExtraRows`) that join the update beside the policy rows (echo);
7. `metrics(ctx, updates)` -> flat metrics logged with the step's own.

Every hook is a no-op on the base class; an arm overrides the ones it needs and keeps per-step state on itself
(a new `StepContext` each step). The built-in arms keep their own config switches: registered with `switch=`
(e.g. `algo.echo_coef > 0`), their `switched_on(cfg)` reads it; any other arm is turned on by naming it in
`TrainConfig.arms`. `verl_refusal`: None when the verl backend runs the arm, else the one-line reason it
refuses it (`envace.trainers.arms.verl_refusal_message` words every refusal).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from envace.trainers.arms import ARMS, configured_arms

if TYPE_CHECKING:
    from envace.trainers.config import TrainConfig
    from envace.trainers.rewarding import RewardScorer
    from envace.trainers.train_rows import ExtraRows, TrainRow
    from envace.types import Task, Trajectory

EMBEDDED_ONLY = "runs on the embedded backend only (envace train --backend embedded, docs/rollout.md)"


@dataclass
class SampledBatch:
    """A step's rollouts: the groups it trains on and every group rolled out (more under dynamic sampling,
    whose `dynamic/*` metrics these are)."""

    kept: list[Trajectory]  # trajectories of the informative groups the step trains on
    generated: list[Trajectory]  # every trajectory rolled out this step (all rounds)
    groups_generated: int = 0
    groups_informative: int = 0  # informative groups seen (before truncation to the batch size)
    refill_rounds: int = 0
    kept_prompt_indices: list[int] = field(default_factory=list)

    def metrics(self) -> dict[str, float]:
        return {
            "dynamic/kept_share": self.groups_informative / max(self.groups_generated, 1),
            "dynamic/groups_kept": float(len(self.kept_prompt_indices)),
            "dynamic/groups_generated": float(self.groups_generated),
            "dynamic/refill_rounds": float(self.refill_rounds),
            "dynamic/rollouts": float(len(self.generated)),
        }


@dataclass
class StepContext:
    """What a hook may read about the current step; `batch` is set once the rollout is scored."""

    cfg: TrainConfig
    step: int
    tokenizer: Any = None
    scorer: RewardScorer | None = None
    pool: list[Task] = field(default_factory=list)  # the run's training tasks
    batch: SampledBatch | None = None

    @property
    def trajectories(self) -> list[Trajectory]:
        """The trajectories the step trains on (empty before the rollout)."""
        return self.batch.kept if self.batch is not None else []

    @classmethod
    def of(cls, cfg: TrainConfig, step: int, trajectories: list[Trajectory], tokenizer: Any = None) -> StepContext:
        """A step that trained on `trajectories`, all of them generated this step (tests, benchmarks)."""
        batch = SampledBatch(kept=trajectories, generated=trajectories,
                             groups_generated=len({t.prompt_index for t in trajectories}))
        return cls(cfg=cfg, step=step, tokenizer=tokenizer, batch=batch)


RolloutFn = Callable[[list["Task"], int, int], list["Trajectory"]]
"""(tasks, first prompt index, rollout seed) -> scored trajectories ordered by (task, sample)."""


class Arm:
    """One training arm (module docstring: the hooks and their order). Subclass and override hooks."""

    name: str = ""  # the registered name (set by build_arms on each instance)
    verl_refusal: ClassVar[str | None] = EMBEDDED_ONLY  # None: the verl backend runs this arm

    def __init__(self, cfg: TrainConfig) -> None:
        self.cfg = cfg

    @classmethod
    def switched_on(cls, cfg: TrainConfig) -> bool:
        """Whether `cfg`'s own switch turns this arm on (built-ins registered with `switch=`); an arm without a
        switch is turned on by naming it in `cfg.arms`."""
        return False

    def before_rollout(self, ctx: StepContext) -> dict[str, Any]:
        return {}

    def sample(self, ctx: StepContext, tasks: list[Task], rollout: RolloutFn) -> SampledBatch | None:
        return None

    def on_batch(self, ctx: StepContext) -> None:
        return None

    def on_rows(self, ctx: StepContext, rows: list[TrainRow]) -> None:
        return None

    def on_advantages(self, ctx: StepContext, rows: list[TrainRow]) -> None:
        return None

    def extra_rows(self, ctx: StepContext) -> list[ExtraRows]:
        return []

    def metrics(self, ctx: StepContext, updates: dict[str, Any]) -> dict[str, float]:
        return {}


def build_arms(cfg: TrainConfig) -> dict[str, Arm]:
    """One instance per configured arm (`configured_arms`), by name, in hook order."""
    arms: dict[str, Arm] = {}
    for name in configured_arms(cfg):
        arm = ARMS.get(name)(cfg)
        arm.name = name
        arms[name] = arm
    samplers = [n for n, a in arms.items() if type(a).sample is not Arm.sample]
    if len(samplers) > 1:
        raise ValueError(f"arms {', '.join(samplers)} each draw the step's batch (Arm.sample); turn on at most one")
    return arms
