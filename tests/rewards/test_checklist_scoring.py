"""CM2 checklist scoring on a hand-worked example, plus a brute-force reference on random inputs."""

import random

import pytest

from envace.rewards.checklist import TurnVerdicts, score_episode, turn_gate
from envace.types import ChecklistItem


def item(i, w, required=False):
    return ChecklistItem(id=i, question=f"{i}?", weight=w, required_for_next_turn=required)


# Two user turns. Turn 1: A (0.5, required for turn 2), B (0.3), C (0.2). Turn 2: D (0.6), E (0.4).
CHECKLIST = [[item("A", 0.5, True), item("B", 0.3), item("C", 0.2)], [item("D", 0.6), item("E", 0.4)]]


def test_hand_worked_two_turn_episode():
    # turn 1: A, C pass, B fails -> 0.5 + 0.2 = 0.7; turn 2: D passes -> 0.6. (0.7 + 0.6) / (1 x 2) = 0.65
    s = score_episode([CHECKLIST], [TurnVerdicts([{"A": True, "B": False, "C": True}]),
                                    TurnVerdicts([{"D": True, "E": False}])])
    assert s.turn_scores == pytest.approx([0.7, 0.6])
    assert s.score == pytest.approx(0.65)
    assert s.terminated_at is None
    table = {(r.turn, r.item_id): r.passed for r in s.items}
    assert table == {(0, "A"): True, (0, "B"): False, (0, "C"): True, (1, "D"): True, (1, "E"): False}


def test_required_item_failure_ends_the_episode():
    # A (required) fails: turn 1 still scores B + C = 0.5; turn 2 scores 0 whatever its verdicts say.
    # (0.5 + 0) / 2 = 0.25
    s = score_episode([CHECKLIST], [TurnVerdicts([{"A": False, "B": True, "C": True}]),
                                    TurnVerdicts([{"D": True, "E": True}])])
    assert s.turn_scores == pytest.approx([0.5, 0.0])
    assert s.score == pytest.approx(0.25)
    assert s.terminated_at == 0
    assert not any(r.passed for r in s.items if r.turn == 1)


def test_failed_tool_call_zeroes_only_its_turn():
    # turn 2 had a failed tool call: 0 instead of 1.0. (1.0 + 0) / 2 = 0.5
    s = score_episode([CHECKLIST], [TurnVerdicts([{"A": True, "B": True, "C": True}]),
                                    TurnVerdicts([{"D": True, "E": True}], tool_failed=True)])
    assert s.turn_scores == [1.0, 0.0] and s.tool_failed == [False, True] and s.score == 0.5


def test_unreached_turns_score_zero():
    s = score_episode([CHECKLIST], [TurnVerdicts([{"A": True, "B": True, "C": False}])])
    assert s.turn_scores == pytest.approx([0.8, 0.0]) and s.score == pytest.approx(0.4)


def test_two_checklists_normalise_by_both_and_terminate_on_majority():
    other = [[item("A", 1.0, True)], [item("D", 1.0)]]
    turn2 = TurnVerdicts([{"D": True, "E": True}, {"D": True}])
    # checklist 0 fails its required A, checklist 1 passes it: one of two is not a majority, go on.
    # turn 1: (B .3 + C .2) + 1.0 = 1.5; turn 2: 1.0 + 1.0 = 2.0; score = 3.5 / (2 checklists x 2 turns)
    s = score_episode([CHECKLIST, other], [TurnVerdicts([{"A": False, "B": True, "C": True}, {"A": True}]), turn2])
    assert s.turn_scores == pytest.approx([1.5, 2.0]) and s.score == pytest.approx(3.5 / 4)
    assert s.terminated_at is None
    # both fail A: a majority, the episode ends after turn 1: (0.5 + 0) / 4
    s = score_episode([CHECKLIST, other], [TurnVerdicts([{"A": False, "B": True, "C": True}, {"A": False}]), turn2])
    assert s.terminated_at == 0 and s.score == pytest.approx(0.5 / 4)


def test_turn_gate():
    assert turn_gate([CHECKLIST[0]], [{"A": True}])
    assert not turn_gate([CHECKLIST[0]], [{"A": False, "B": True, "C": True}])
    assert not turn_gate([CHECKLIST[0]], [{}])  # an unjudged required item counts as failed


def test_required_failure_in_the_last_turn_is_not_a_termination():
    last = [[item("A", 1.0)], [item("D", 1.0, True)]]
    s = score_episode([last], [TurnVerdicts([{"A": True}]), TurnVerdicts([{"D": False}])])
    assert s.terminated_at is None and s.score == 0.5


def _reference(sets, verdicts):
    """Obviously-correct restatement of the CM2 rule, turn by turn."""
    C, T = len(sets), len(sets[0])
    total, alive = 0.0, True
    for t in range(T):
        if not alive or t >= len(verdicts):
            continue
        v = verdicts[t]
        fails = 0
        for c in range(C):
            got = 0.0
            for it in sets[c][t]:
                if v.passed[c].get(it.id, False):
                    got += it.weight
            if not v.tool_failed:
                total += got
            if any(it.required_for_next_turn and not v.passed[c].get(it.id, False) for it in sets[c][t]):
                fails += 1
        if fails > C / 2:
            alive = False
    return total / (C * T)


def test_matches_reference_on_random_episodes():
    rng = random.Random(0)
    for _ in range(400):
        C, T = rng.randint(1, 3), rng.randint(1, 4)
        sets = []
        for c in range(C):
            turns = []
            for t in range(T):
                k = rng.randint(1, 4)
                raw = [rng.random() + 0.01 for _ in range(k)]
                turns.append([item(f"{c}{t}{j}", w / sum(raw), rng.random() < 0.3) for j, w in enumerate(raw)])
            sets.append(turns)
        verdicts = [TurnVerdicts([{it.id: rng.random() < 0.7 for it in sets[c][t]} for c in range(C)],
                                 tool_failed=rng.random() < 0.15) for t in range(rng.randint(0, T))]
        assert score_episode(sets, verdicts).score == pytest.approx(_reference(sets, verdicts))


def test_rejects_mismatched_inputs():
    with pytest.raises(ValueError, match="no checklists"):
        score_episode([], [])
    with pytest.raises(ValueError, match="judged turns"):
        score_episode([[[item("A", 1.0)]]], [TurnVerdicts([{}]), TurnVerdicts([{}])])
