"""The RL-headroom anatomy (envace.evaluation.anatomy) on hand-built groups: group composition, and each
failing episode's divergence token with the probabilities worked out by hand."""

from __future__ import annotations

import math

import pytest

from envace.evaluation.anatomy import anatomy, first_divergence
from envace.types import Mode, Role, Task, Trajectory, Turn


def _task(shape: str) -> Task:
    return Task(uuid=shape, tools=[], messages=[], meta={"shape": shape})


def _traj(task: Task, prompt: int, sample: int, success: bool, act_turns: list[list[tuple[int, float]]]) -> Trajectory:
    t = Trajectory(task=task, prompt_index=prompt, sample_index=sample, mode=Mode.ENV,
                   reward_breakdown={"success": float(success)})
    for toks in act_turns:
        t.add_turn(Turn(role=Role.ACT, prompt_ids=[1], response_ids=[a for a, _ in toks],
                        logprobs=[lp for _, lp in toks], text="", temperature=1.0))
        # a Rehearse / observation turn between Act turns must not enter the Act token stream
        t.add_turn(Turn(role=Role.REHEARSE, prompt_ids=[1], response_ids=[99], logprobs=[-9.0], text="",
                        temperature=1.0))
    return t


L = math.log


def test_first_divergence_picks_the_longest_shared_prefix():
    fail = [(1, L(0.9)), (2, L(0.8)), (7, L(0.1))]
    s1 = [(1, L(0.9)), (5, L(0.6)), (6, L(0.5))]
    s2 = [(1, L(0.9)), (2, L(0.8)), (3, L(0.7))]
    pos, pf, ps = first_divergence(fail, [s1, s2])
    assert pos == 2 and pf == pytest.approx(0.1) and ps == pytest.approx(0.7)
    # a failure that is a prefix of a success diverges in no Act token
    assert first_divergence(fail[:2], [s2]) is None


def test_anatomy_counts_groups_and_reads_divergences_across_turns():
    book, cancel, pair = _task("book"), _task("cancel"), _task("pair")
    trajs = [
        # mixed: the failure guesses the day in its second Act turn (token 31 at p 0.2; the success took 30 at 0.25)
        _traj(book, 0, 0, True, [[(10, L(0.99))], [(20, L(0.9)), (30, L(0.25))]]),
        _traj(book, 0, 1, False, [[(10, L(0.99))], [(20, L(0.9)), (31, L(0.2))]]),
        _traj(book, 0, 2, True, [[(10, L(0.99))], [(20, L(0.9)), (30, L(0.25))]]),
        # all succeed
        _traj(cancel, 1, 0, True, [[(10, L(0.99))]]),
        _traj(cancel, 1, 1, True, [[(10, L(0.99))]]),
        # all fail
        _traj(pair, 2, 0, False, [[(11, L(0.5))]]),
        _traj(pair, 2, 1, False, [[(12, L(0.5))]]),
    ]
    a = anatomy(trajs)
    assert (a.groups, a.all_success, a.all_fail, a.mixed) == (3, 1, 1, 1)
    assert [(d.shape, d.token) for d in a.divergences] == [("book", 31)]
    assert a.divergences[0].p_failing == pytest.approx(0.2)
    assert a.divergences[0].p_success == pytest.approx(0.25)
    s = a.summary(decode=lambda tok: f"<{tok}>")
    assert s["success_by_shape"] == {"book": round(2 / 3, 3), "cancel": 1.0, "pair": 0.0}
    assert s["mixed_groups_by_shape"] == {"book": 1}
    assert s["mixed_share"] == pytest.approx(1 / 3)
    assert s["slip_share"] == 0.0  # p 0.2 is a guess among alternatives, not a rare slip
    assert s["top_divergence_tokens"] == [["book", "<31>", 1]]
