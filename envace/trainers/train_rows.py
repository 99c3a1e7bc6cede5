"""Training rows: one row per role call (every trainable Act and Rehearse generation), as in the reference
code. History, rehearsed/real tool text and user turns sit in the row's prompt and get no loss; only the
generated tokens of that call are trained. Every row of a trajectory inherits the trajectory's reward;
advantages come from the configured estimator grouped by (prompt, role), or, for an estimator whose baseline
is carried across steps (`role_moving_average`), against the trainer's `RoleMovingBaseline`.

A row is a view over its `Turn`, not a copy: token ids, log-probs and temperature are read from the turn
and the advantage is written to it, so the store and the dashboard show the advantage the loss used
without matching rows back to turns.

`ExtraRows` is a second kind of row set: supervised targets an arm adds to the update (the echo arm's real
answers), trained by `coef` x their token-mean NLL beside the policy loss (envace.trainers.update).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from envace.algos import RoleMovingBaseline, get_advantage_fn
from envace.toolcall import strip_end_markers
from envace.types import Role, Trajectory, Turn


def _forward(name: str) -> property:
    """A row attribute that reads and writes the field `name` of the row's turn."""
    return property(lambda row: getattr(row.turn, name), lambda row, v: setattr(row.turn, name, v),
                    doc=f"`Turn.{name}` of the row's turn")


@dataclass(eq=False)
class TrainRow:
    turn: Turn
    prompt_index: int
    trajectory_key: int  # index of the trajectory in the step's batch
    reward: float  # the trajectory's reward (NaN when unscored: left out of group baselines)

    role = _forward("role")
    prompt_ids = _forward("prompt_ids")
    response_ids = _forward("response_ids")
    old_logprobs = _forward("logprobs")  # the sampling engine's own log-probs
    temperature = _forward("temperature")

    @property
    def advantage(self) -> float:
        """`Turn.advantage` (0.0 until the trainer sets one)."""
        a = self.turn.advantage
        return 0.0 if a is None else a

    @advantage.setter
    def advantage(self, value: float) -> None:
        self.turn.advantage = value

    @classmethod
    def standalone(cls, *, role: Role, prompt_ids: list[int], response_ids: list[int], old_logprobs: list[float],
                   temperature: float, prompt_index: int, trajectory_key: int, reward: float,
                   advantage: float = 0.0) -> TrainRow:
        """A row over a fresh turn of its own, for callers without a rollout (benchmarks of the update, tests)."""
        turn = Turn(role=role, prompt_ids=prompt_ids, response_ids=response_ids, logprobs=old_logprobs, text="",
                    temperature=temperature, advantage=advantage)
        return cls(turn, prompt_index, trajectory_key, reward)


@dataclass
class ExtraRows:
    """Supervised rows an arm adds to the update: `coef` x the token-mean NLL (temperature 1) of `rows`' response
    tokens joins each optimizer step's loss. `name` prefixes the update metrics (`<name>_nll`, `<name>_tokens`,
    `<name>_rows`) and seeds the set's own chunk order; `role` is the role its gradient counts for under per-role
    clipping and the model that learns it under a per-role policy."""

    name: str
    rows: list[TrainRow]
    coef: float
    role: Role = Role.REHEARSE


def is_empty_output(text: str) -> bool:
    """The generated text says nothing once end-of-turn markers and whitespace are stripped."""
    return not strip_end_markers(text or "").strip()


def build_rows(trajectories: list[Trajectory], empty_output_penalty: float = 0.0) -> list[TrainRow]:
    """Rows of every trainable, non-empty generation (frozen-simulator turns are skipped). A row whose text is
    empty gets `empty_output_penalty` subtracted from its reward (the reference's invalid-action penalty)."""
    rows: list[TrainRow] = []
    for key, traj in enumerate(trajectories):
        reward = float("nan") if traj.reward is None else float(traj.reward)
        for turn in traj.turns:
            if turn.trainable and turn.response_ids:
                penalty = empty_output_penalty if empty_output_penalty and is_empty_output(turn.text) else 0.0
                rows.append(TrainRow(turn, traj.prompt_index, key, reward - penalty))
    return rows


def assign_advantages(rows: list[TrainRow], estimator: str, weighting: str, norm_std: bool,
                      baseline: RoleMovingBaseline | None = None) -> torch.Tensor:
    """Compute advantages for `rows` and set them on the rows' turns. `baseline`: the per-role average carried
    across steps (estimators with `carries_baseline`); it is read, then moved by this step's rewards."""
    if not rows:
        return torch.zeros(0)
    fn = get_advantage_fn(estimator)
    cols = (torch.tensor([r.reward for r in rows], dtype=torch.float32),
            [r.prompt_index for r in rows], [r.trajectory_key for r in rows], [r.role for r in rows])
    if baseline is not None:
        adv = baseline.advantages(fn, *cols, weighting=weighting, norm_std=norm_std)
    else:
        adv = fn(*cols, weighting=weighting, norm_std=norm_std)
    for row, a in zip(rows, adv.tolist()):
        row.advantage = a
    return adv
