"""The grounded arm: EnvACE (rollout.mode=rehearse) where a share of the rehearsed calls is also executed for
real, after the episode, and the Rehearse rows of those calls get a fidelity reward beside the task reward.

Selection: each answered Rehearse turn of a trained trajectory is grounded with probability
`grounded.fraction`, decided by its own seeded draw (`derive_seed(seed, step, prompt, sample, "grounded",
turn id)`), so a rerun grounds the same calls. Real answers: the shadow monitor's replay
(envace.trainers.arms.shadow.real_messages): every answered call of the trajectory, in the order the episode
answered them, in a fresh `WorldEnvironment` reset to the task, so call j's real answer is the world's answer
after the real effects of calls 1..j-1 (the same actions, real observations). Only after the episode has ended:
the episode continued on the rehearsed answers, no real answer is ever in an Act or Rehearse prompt.
When the shadow monitor already replayed the trajectory, its `Turn.real_observation` is reused.

Fidelity f of a grounded call: `envace.fidelity.turn_fidelity` (the scorer worldbench uses), its leaf F1
(`grounded.metric=leaf_f1`, `field_f1`) or exact match (`exact`, 0/1) of the rehearsed answer (the rollout's
own parse; an unparseable one scores 0) against the real agent-visible value.

How it enters the advantage. Every row keeps its trajectory's task reward R (checklist), except a grounded
call's Rehearse row, whose reward becomes R + w·f (`grounded.coef` = w; an unscored R stays NaN). Advantages
are then computed exactly as for EnvACE, on these row rewards: role-wise GRPO grouped by (prompt, role), so
Act rows are untouched (A = R − mean of the prompt's Act-row rewards) and a Rehearse row gets
A = (R + w·f·g) − mean over the prompt's Rehearse rows of (R + w·f·g), g = 1 for a grounded row, else 0
(per_output weighting; per_trajectory: each trajectory's mean over its Rehearse rows is one member of the
baseline). The ungrounded Rehearse rows' baseline thus includes the grounded rows' fidelity bonus.

Logged per step: `grounded/calls` (grounded calls), `grounded/fidelity` (their mean f), `grounded/env_calls`
(real calls replayed for them). As an arm (`GroundedArm`, switched on by `grounded.fraction` > 0): `on_rows`
grounds the step's trajectories and adds the fidelity rewards before the advantages. Departure: a real call
per grounded call is spent in a replayed world, so a grounded run is not environment-free; with fraction 0
nothing is replayed and the run is plain EnvACE.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field

from envace.fidelity import turn_fidelity
from envace.rollout.seeds import derive_seed
from envace.trainers.arms.base import Arm, StepContext
from envace.trainers.arms.shadow import real_messages
from envace.trainers.train_rows import TrainRow
from envace.types import Role, Trajectory, Turn

METRIC_KEYS = {"leaf_f1": "field_f1", "exact": "exact_match"}


@dataclass
class Grounding:
    """The step's grounded calls: fidelity per grounded Rehearse turn (by object identity)."""

    fidelity: dict[int, float] = field(default_factory=dict)
    env_calls: int = 0

    def metrics(self) -> dict[str, float]:
        f = list(self.fidelity.values())
        return {"grounded/calls": float(len(f)), "grounded/fidelity": sum(f) / len(f) if f else 0.0,
                "grounded/env_calls": float(self.env_calls)}


def answered_turns(traj: Trajectory) -> list[Turn]:
    return [u for u in traj.turns_of(Role.REHEARSE) if u.call is not None]


def chosen(traj: Trajectory, fraction: float, seed: int, step: int) -> list[Turn]:
    """The answered Rehearse turns of `traj` that are grounded (module docstring)."""
    if fraction <= 0:
        return []
    return [u for u in answered_turns(traj)
            if random.Random(derive_seed(seed, step, traj.prompt_index, traj.sample_index, "grounded",
                                         u.id)).random() < fraction]


def ground(trajs: list[Trajectory], *, fraction: float, metric: str, seed: int, step: int,
           env_factory: Callable[[], object]) -> Grounding:
    """Attach real answers to the chosen turns (replaying where the shadow monitor has not) and score them."""
    out = Grounding()
    key = METRIC_KEYS[metric]
    for traj in trajs:
        picked = chosen(traj, fraction, seed, step)
        if not picked:
            continue
        if any(u.real_observation is None for u in picked):
            env = env_factory()
            env.reset(traj.task)  # type: ignore[attr-defined]
            _, real = real_messages(traj, env)
            out.env_calls += len(real)
            for turn, obs in zip(answered_turns(traj), real):
                if turn.real_observation is None:
                    turn.real_observation = obs
        for u in picked:
            scores = turn_fidelity(u)
            if scores is not None:
                out.fidelity[id(u)] = float(scores[key])
    return out


def apply_fidelity_reward(rows: list[TrainRow], grounding: Grounding, coef: float) -> int:
    """Rehearse rows of grounded calls: reward += coef x fidelity (NaN stays NaN). Returns the rows changed."""
    n = 0
    for r in rows:
        f = grounding.fidelity.get(id(r.turn))
        if f is not None and r.role is Role.REHEARSE and not math.isnan(r.reward):
            r.reward = r.reward + coef * f
            n += 1
    return n


class GroundedArm(Arm):
    """`grounded.fraction` > 0 (rollout.mode=rehearse, data.source=world, checked by TrainConfig)."""

    grounding: Grounding | None = None  # the current step's, set by on_rows

    @classmethod
    def switched_on(cls, cfg) -> bool:
        return cfg.grounded.fraction > 0

    def on_rows(self, ctx: StepContext, rows: list[TrainRow]) -> None:
        # after every episode of the step ended (the real answers never reach a prompt)
        from envace.trainers.rewarding import RewardScorer

        g = self.cfg.grounded
        self.grounding = ground(ctx.trajectories, fraction=g.fraction, metric=g.metric, seed=self.cfg.seed,
                                step=ctx.step, env_factory=RewardScorer.env_factory())
        apply_fidelity_reward(rows, self.grounding, g.coef)

    def metrics(self, ctx: StepContext, updates: dict) -> dict[str, float]:
        return self.grounding.metrics() if self.grounding is not None else {}
