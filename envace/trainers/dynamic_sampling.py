"""Dynamic sampling (DAPO, Yu et al. 2025, §3.2): keep only groups that carry a GRPO signal.

A group is one prompt's K trajectories; when all K scored rewards are equal every advantage is zero, so
the group only dilutes a token-mean loss. Such groups are dropped and further prompts are rolled out,
round by round (seeds derived from (seed, step, "refill", r); prompt indices after every earlier round's),
until the step holds `prompts_per_step` informative groups or `max_refill_rounds` have run.

Departures from DAPO (which over-generates a fixed multiple): each round asks for the missing groups
divided by the informative share seen so far (at least 1/4, at most 4x the deficit); when the rounds run
out the step trains on the informative groups it has; surplus groups of the last round are dropped in
prompt order.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field

from envace.rollout.seeds import derive_seed
from envace.types import Task, Trajectory

# Rewards closer than this count as equal (checklist scores are sums of weights; float noise only).
EQUAL_TOL = 1e-9


@dataclass
class SampledBatch:
    """A step's rollouts after dynamic sampling."""

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


RolloutFn = Callable[[list[Task], int, int], list[Trajectory]]
"""(tasks, first prompt index, rollout seed) -> scored trajectories ordered by (task, sample)."""


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
