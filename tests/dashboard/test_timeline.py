"""The trajectory timeline on hand-built records: grouping of turns, call/answer pairing through the stored
links, diffs."""

from __future__ import annotations

from datetime import UTC, datetime

from envace.store.models import TrajectoryMode
from envace.store.records import FidelityRecord, TrajectoryRecord, TrajectorySummary, TurnRecord
from envace.types import CallRef, ErrorCode, Mode, Observation, Role, ToolCall
from envace_dashboard.timeline import (
    ActBlock,
    OtherBlock,
    UserBlock,
    line_diff,
    observation_value,
    pretty,
    timeline,
    tokens_by_role,
    turn_rows,
)


def turn(i, role, text="", **kw) -> TurnRecord:
    base = dict(turn_index=i, role=role, user_turn=0, text=text, tool_calls=[], parse_error=None, call=None,
                observation=None, real_observation=None, n_tokens=0, logprob_mean=None, logprob_min=None,
                temperature=None, advantage=None, trainable=True)
    base.update(kw)
    return TurnRecord(**base)


def record(turns, pairs=()) -> TrajectoryRecord:
    s = TrajectorySummary(id=1, run_id="r", step=0, split="train", mode=TrajectoryMode.TRAIN,
                          rollout_mode=Mode.REHEARSE, prompt_id="p", prompt_index=0, sample_index=0, domain="",
                          reward=1.0, termination=None, n_turns=len(turns), n_tool_calls=0, env_calls=0,
                          created_at=datetime.now(UTC))
    return TrajectoryRecord(s, None, list(turns), [], list(pairs))


C1 = ToolCall("a", {"x": 1})
C2 = ToolCall("b", {"y": 2})


def rehearsed(value) -> Observation:
    return Observation(value, source=Role.REHEARSE)


def test_two_calls_paired_by_link_with_real_answer_and_diff():
    rec = record([
        turn(0, Role.USER, "hi"),
        turn(1, Role.ACT, "call both", tool_calls=[C1, C2], n_tokens=5, id=0),
        turn(2, Role.REHEARSE, "r1", call=C1, observation=rehearsed({"v": 1}), n_tokens=3, id=1,
             answers=CallRef(0, 0)),
        turn(3, Role.REHEARSE, "r2", call=C2, observation=rehearsed({"v": 2, "w": "x"}),
             real_observation=Observation({"v": 2, "w": "y"}), n_tokens=4, id=2, answers=CallRef(0, 1)),
        turn(4, Role.ACT, "bye", n_tokens=2, id=3),
    ], pairs=[FidelityRecord(3, "b", {"name": "b", "arguments": {"y": 2}}, "r2", {"v": 2, "w": "x"},
                             {"v": 2, "w": "y"}, False, True, True, 0.5)])
    blocks = timeline(rec)
    assert [type(b) for b in blocks] == [UserBlock, ActBlock, ActBlock]
    first = blocks[1]
    assert [r.call for r in first.rows] == [C1, C2]
    assert [r.answer.turn_index for r in first.rows] == [2, 3]
    assert not first.rows[0].has_real and first.rows[0].diff is None
    row = first.rows[1]
    assert row.has_real and row.real_value == {"v": 2, "w": "y"} and row.fidelity.field_f1 == 0.5
    # by hand: the pretty JSON of both values differs only in the "w" line
    assert row.diff == ('--- rehearsed\n+++ real\n@@ -1,4 +1,4 @@\n {\n   "v": 2,\n-  "w": "x"\n+  "w": "y"\n }')
    assert blocks[2].is_final_reply and blocks[2].rows == []
    assert tokens_by_role(rec) == {"act": 7, "rehearse": 7, "user": 0}


def test_the_link_decides_not_the_order():
    """Answers stored in the opposite order of the calls, and an answer to an earlier Act output after a
    later one: each lands in the row its link names (pairing by order would swap them)."""
    rec = record([
        turn(0, Role.ACT, "two calls", tool_calls=[C1, C2], id=0),
        turn(1, Role.REHEARSE, "to b", call=C2, id=1, answers=CallRef(0, 1)),
        turn(2, Role.REHEARSE, "to a", call=C1, id=2, answers=CallRef(0, 0)),
        turn(3, Role.ACT, "one more", tool_calls=[C2], id=3),
        turn(4, Role.ENV, "late answer to the first output's a", call=C1, id=4, answers=CallRef(0, 0)),
        turn(5, Role.ENV, "to the second output", call=C2, id=5, answers=CallRef(3, 0)),
    ])
    first, second = timeline(rec)
    assert [(r.call, r.answer.text) for r in first.rows] == [(C1, "to a"), (C2, "to b")]
    # call (0, 0) is already answered: the second answer to it is a row of its own, never an overwrite
    assert [(r.call, r.answer.text) for r in second.rows] == [(C2, "to the second output"),
                                                              (C1, "late answer to the first output's a")]


def test_equal_answers_give_an_empty_diff_and_unparsed_rehearsal_is_shown_raw():
    same = Observation({"k": [1, 2]})
    rec = record([turn(0, Role.ACT, "c", tool_calls=[C1], id=0),
                  turn(1, Role.REHEARSE, "r", call=C1, observation=rehearsed({"k": [1, 2]}), real_observation=same,
                       id=1, answers=CallRef(0, 0))])
    assert timeline(rec)[0].rows[0].diff == ""
    bad = record([turn(0, Role.ACT, "c", tool_calls=[C1], id=0),
                  turn(1, Role.REHEARSE, "not json", call=C1, id=1, answers=CallRef(0, 0),
                       observation=Observation(None, Role.REHEARSE, ErrorCode.RESULT_JSON_DECODE),
                       parse_error=ErrorCode.RESULT_JSON_DECODE, real_observation=same)])
    row = timeline(bad)[0].rows[0]
    assert row.rehearsed_text == "not json"
    assert row.diff.splitlines()[3] == "-not json"


def test_unlinked_answers_get_rows_of_their_own_and_other_roles_their_block():
    """Rows stored before the links existed: no pairing is guessed."""
    rec = record([turn(0, Role.REHEARSE, "orphan", call=C1),
                  turn(1, Role.ACT, "one call", tool_calls=[C1]),
                  turn(2, Role.REHEARSE, "first", call=C1),
                  turn(3, Role.REHEARSE, "extra", call=C2),
                  turn(4, Role.JUDGE, "verdict")])
    blocks = timeline(rec)
    assert blocks[0].act is None and blocks[0].rows[0].answer.text == "orphan" and blocks[0].rows[0].call == C1
    assert [(r.call, r.answer and r.answer.text) for r in blocks[1].rows] == [(C1, None), (C1, "first"),
                                                                              (C2, "extra")]
    assert isinstance(blocks[2], OtherBlock) and blocks[2].turn.text == "verdict"


def test_malformed_act_is_not_a_final_reply():
    rec = record([turn(0, Role.ACT, "<tool_call>{bad", parse_error=ErrorCode.JSON_DECODE)])
    block = timeline(rec)[0]
    assert block.rows == [] and not block.is_final_reply


def test_observation_value_matches_what_the_agent_saw():
    err = Observation(None, Role.ENV, ErrorCode.TOOL_ERROR, "no such id")
    assert observation_value(err) == {"error_tool_call": {"code": "TOOL_ERROR", "message": "no such id"}}
    assert observation_value(Observation(0)) == 0
    assert observation_value(None) is None


def test_helpers():
    assert pretty({"b": 1, "a": "é"}) == '{\n  "a": "é",\n  "b": 1\n}'
    assert line_diff("a\nb", "a\nb") == ""
    rows = turn_rows(record([turn(0, Role.ACT, "x" * 150, advantage=0.5, n_tokens=9)]), preview=100)
    assert rows[0]["text"] == "x" * 100 + "…" and rows[0]["advantage"] == 0.5 and rows[0]["tokens"] == 9
