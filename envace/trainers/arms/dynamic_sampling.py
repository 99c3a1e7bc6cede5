"""Dynamic sampling (DAPO, Yu et al. 2025, §3.2): keep only groups that carry a GRPO signal.

A group is one prompt's K trajectories; when all K scored rewards are equal every advantage is zero, so
the group only dilutes a token-mean loss. Such groups are dropped and further prompts are rolled out,
round by round (seeds derived from (seed, step, "refill", r); prompt indices after every earlier round's),
until the step holds `prompts_per_step` informative groups or `max_refill_rounds` have run.

Departures from DAPO (which over-generates a fixed multiple): each round asks for the missing groups
divided by the informative share seen so far (at least 1/4, at most 4x the deficit); when the rounds run
out the step trains on the informative groups it has; surplus groups of the last round are dropped in
prompt order.

As an arm (`DynamicSamplingArm`, switched on by `dynamic_sampling.enabled`): `sample` draws the step's batch,
`metrics` logs `dynamic/*`.
"""

from __future__ import annotations

import math
import random

from envace.rollout.seeds import derive_seed
from envace.trainers.arms.base import Arm, RolloutFn, SampledBatch, StepContext
from envace.types import Task, Trajectory

# Rewards closer than this count as equal (checklist scores are sums of weights; float noise only).
EQUAL_TOL = 1e-9


def informative_groups(trajs: list[Trajectory]) -> list[int]:
    """Prompt indices (in first-seen order) whose scored rewards are not all equal; a group with fewer
    than two scored trajectories carries no comparison and counts as uninformative."""
    by_prompt: dict[int, list[float]] = {}
    for t in trajs:
        by_prompt.setdefault(t.prompt_index, [])
        if t.reward is not None:
            by_prompt[t.prompt_index].append(float(t.reward))
    return [p for p, rs in by_prompt.items() if len(rs) >= 2 and max(rs) - min(rs) > EQUAL_TOL]


def refill_size(deficit: int, informative: int, generated: int) -> int:
    """Prompts to roll out next: the deficit over the informative share so far, clamped to
    [deficit, 4 * deficit] (a share below 1/4 would ask for more than 4x)."""
    share = informative / generated if generated else 1.0
    return min(4 * deficit, max(deficit, math.ceil(deficit / max(share, 0.25))))


def sample_with_refill(pool: list[Task], first: list[Task], rollout: RolloutFn, *, seed: int, step: int,
                       prompts_per_step: int, max_refill_rounds: int) -> SampledBatch:
    """Roll out `first`, then refill from the unused part of `pool` until the step has
    `prompts_per_step` informative groups or `max_refill_rounds` refills ran."""
    generated = rollout(first, 0, seed)
    used = {id(t) for t in first}
    next_index = len(first)
    batch = SampledBatch(kept=[], generated=list(generated), groups_generated=len(first))
    keep = informative_groups(generated)
    for r in range(1, max_refill_rounds + 1):
        deficit = prompts_per_step - len(keep)
        unused = [t for t in pool if id(t) not in used]
        if deficit <= 0 or not unused:
            break
        n = min(len(unused), refill_size(deficit, len(keep), batch.groups_generated))
        tasks = random.Random(derive_seed(seed, step, "refill", r)).sample(unused, n)
        used.update(id(t) for t in tasks)
        more = rollout(tasks, next_index, derive_seed(seed, step, "refill", r))
        next_index += len(tasks)
        batch.generated.extend(more)
        batch.groups_generated += len(tasks)
        batch.refill_rounds = r
        keep.extend(informative_groups(more))
    batch.groups_informative = len(keep)
    batch.kept_prompt_indices = keep[:prompts_per_step]
    wanted = set(batch.kept_prompt_indices)
    batch.kept = [t for t in batch.generated if t.prompt_index in wanted]
    return batch


class DynamicSamplingArm(Arm):
    """`dynamic_sampling.enabled`."""

    @classmethod
    def switched_on(cls, cfg) -> bool:
        return cfg.dynamic_sampling.enabled

    def sample(self, ctx: StepContext, tasks: list[Task], rollout: RolloutFn) -> SampledBatch:
        ds, cfg = self.cfg.dynamic_sampling, self.cfg
        return sample_with_refill(ctx.pool, tasks, rollout, seed=cfg.seed, step=ctx.step,
                                  prompts_per_step=cfg.prompts_per_step, max_refill_rounds=ds.max_refill_rounds)

    def metrics(self, ctx: StepContext, updates: dict) -> dict[str, float]:
        return ctx.batch.metrics() if ctx.batch is not None else {}
