"""Training rows are views over their turns: the advantage the loss uses is the one on the turn,
whatever order the rows are in, and turns that are not trained on keep no advantage."""

from __future__ import annotations

import math

from envace.trainers.train_rows import TrainRow, assign_advantages, build_rows
from envace.types import Mode, Role, Task, Trajectory, Turn

TASK = Task(uuid="t", tools=[], messages=[])


def _turn(role: Role, n: int = 2, trainable: bool = True) -> Turn:
    return Turn(role=role, prompt_ids=[1, 2], response_ids=[3] * n, logprobs=[-0.5] * n, text="x",
                temperature=1.0, trainable=trainable)


def _traj(prompt: int, sample: int, reward: float | None, turns: list[Turn]) -> Trajectory:
    traj = Trajectory(task=TASK, prompt_index=prompt, sample_index=sample, mode=Mode.REHEARSE, reward=reward)
    for t in turns:
        traj.add_turn(t)
    return traj


def _batch() -> list[Trajectory]:
    return [
        _traj(0, 0, 1.0, [_turn(Role.ACT), _turn(Role.REHEARSE), _turn(Role.REHEARSE, trainable=False),
                          _turn(Role.ACT, n=0)]),  # a frozen simulator's turn and an empty generation
        _traj(0, 1, 0.0, [_turn(Role.ACT), _turn(Role.REHEARSE)]),
        _traj(1, 0, None, [_turn(Role.ACT)]),  # unscored
        _traj(1, 1, 0.5, [_turn(Role.ACT)]),
    ]


# by hand, role-wise GRPO, per-output baseline, no std division:
# (prompt 0, act) {1.0, 0.0} and (prompt 0, rehearse) {1.0, 0.0}: mean 0.5 -> +0.5 / -0.5;
# (prompt 1, act): one scored row, from one trajectory -> 0 (envace.algos.advantages), the unscored row 0.
EXPECTED = [[0.5, 0.5, None, None], [-0.5, -0.5], [0.0], [0.0]]


def test_advantages_land_on_their_own_turns_in_any_row_order():
    for order in (lambda rows: rows, lambda rows: rows[::-1], lambda rows: rows[1::2] + rows[0::2]):
        trajs = _batch()
        rows = order(build_rows(trajs))
        assert len(rows) == 6  # the frozen and the empty generation have no row
        assign_advantages(rows, "role_grpo", "per_output", False)
        assert [[t.advantage for t in traj.turns] for traj in trajs] == EXPECTED
        assert all(r.advantage == r.turn.advantage for r in rows)


def test_a_row_reads_and_writes_its_turn():
    (traj,) = [_traj(0, 0, 1.0, [_turn(Role.REHEARSE, n=3)])]
    (row,) = build_rows([traj])
    turn = traj.turns[0]
    assert (row.role, row.old_logprobs, row.temperature) == (Role.REHEARSE, turn.logprobs, 1.0)
    assert row.response_ids is turn.response_ids  # no copy
    assert row.advantage == 0.0 and turn.advantage is None  # unset reads as 0 for the loss
    row.advantage = -0.25
    assert turn.advantage == -0.25
    assert math.isnan(build_rows([_traj(0, 1, None, [_turn(Role.ACT)])])[0].reward)
    alone = TrainRow.standalone(role=Role.ACT, prompt_ids=[1], response_ids=[2], old_logprobs=[-1.0],
                                temperature=0.7, prompt_index=3, trajectory_key=4, reward=1.0, advantage=0.5)
    assert (alone.turn.advantage, alone.turn.temperature, alone.prompt_index) == (0.5, 0.7, 3)
