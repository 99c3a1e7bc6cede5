"""Training rows: one row per role call (every Act generation and every Rehearse generation), as in
the reference code. History, rehearsed/real tool text and user turns sit in the row's prompt and get no
loss; only the generated tokens of that call are trained. Every row of a trajectory inherits the
trajectory's reward; advantages come from the configured estimator grouped by (prompt, role).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from envace.algos import get_advantage_fn
from envace.types import Role, Trajectory


@dataclass
class TrainRow:
    role: Role
    prompt_ids: list[int]
    response_ids: list[int]
    old_logprobs: list[float]
    temperature: float
    prompt_index: int
    trajectory_key: int
    reward: float
    advantage: float = 0.0


def build_rows(trajectories: list[Trajectory]) -> list[TrainRow]:
    """Rows of every trainable, non-empty generation (frozen-simulator turns are skipped)."""
    rows: list[TrainRow] = []
    for key, traj in enumerate(trajectories):
        reward = float("nan") if traj.reward is None else float(traj.reward)
        for turn in traj.turns:
            if not turn.trainable or not turn.response_ids:
                continue
            rows.append(TrainRow(role=turn.role, prompt_ids=list(turn.prompt_ids),
                                 response_ids=list(turn.response_ids), old_logprobs=list(turn.logprobs),
                                 temperature=turn.temperature, prompt_index=traj.prompt_index,
                                 trajectory_key=key, reward=reward))
    return rows


def assign_advantages(rows: list[TrainRow], trajectories: list[Trajectory], estimator: str,
                      weighting: str, norm_std: bool) -> torch.Tensor:
    """Compute advantages for `rows`, store them on the rows and on the source turns."""
    if not rows:
        return torch.zeros(0)
    fn = get_advantage_fn(estimator)
    adv = fn(torch.tensor([r.reward for r in rows], dtype=torch.float32),
             [r.prompt_index for r in rows], [r.trajectory_key for r in rows], [r.role for r in rows],
             weighting=weighting, norm_std=norm_std)
    for row, a in zip(rows, adv.tolist()):
        row.advantage = a
    # mirror onto turns so the store / dashboard can show per-row advantages
    it = iter(adv.tolist())
    for traj in trajectories:
        for turn in traj.turns:
            if turn.trainable and turn.response_ids:
                turn.advantage = next(it)
    return adv
