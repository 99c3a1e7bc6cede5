"""The flip-sign diagnostic (`flip_advantage_sign`): every advantage negated after it is computed, so a working
loop drives the reward down instead of up (with `reward=toy`, envace.trainers.toy_reward: the loop must climb,
or with the sign flipped descend). Rows are views of their turns: the store sees the flipped advantage."""

from __future__ import annotations

from envace.trainers.arms.base import Arm, StepContext
from envace.trainers.train_rows import TrainRow


def flip_advantages(rows: list[TrainRow]) -> None:
    """Negate every advantage (on the rows' turns: a row is a view)."""
    for r in rows:
        r.advantage = -r.advantage


class FlipSignArm(Arm):
    """`flip_advantage_sign`."""

    @classmethod
    def switched_on(cls, cfg) -> bool:
        return cfg.flip_advantage_sign

    def on_advantages(self, ctx: StepContext, rows: list[TrainRow]) -> None:
        flip_advantages(rows)
