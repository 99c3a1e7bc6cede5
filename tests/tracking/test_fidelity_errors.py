"""Error prediction of the rehearsed world, apart from the other fidelity scores: per tool, precision and
recall of "the real environment returned an error", both sides read with the one predicate
(`envace.execution_result.is_error_value`), on hand-worked turns."""

from __future__ import annotations

import pytest

from envace.execution_result import is_error_text, is_error_value, parse_execution_result, render_execution_result
from envace.fidelity import aggregate_errors, error_metric_dict, turn_error_verdict
from envace.types import ErrorCode, Observation, Role, ToolCall, Turn


@pytest.mark.parametrize("value, is_error", [
    ({"error": "unknown account 'x'"}, True), ({"error_tool_call": {"code": "C", "message": "m"}}, True),
    ([{"ok": 1}, {"error_tool_call": {}}], True), ({"balance": 3, "errors": 0}, False), ([1, 2], False),
    ("error", False), (None, False)])
def test_the_error_predicate(value, is_error):
    assert is_error_value(value) is is_error
    assert is_error_text('{"error": "x"}') and not is_error_text("not json") and not is_error_text(None)


def _turn(tool, rehearsed_text, real_content, real_error=None):
    t = Turn(role=Role.REHEARSE, prompt_ids=[1], response_ids=[2], logprobs=[0.0], text=rehearsed_text,
             temperature=1.0, call=ToolCall(tool, {}), observation=parse_execution_result(rehearsed_text))
    t.real_observation = Observation(content=real_content, source=Role.ENV, error=real_error)
    return t


ERR = {"error": "no such item"}
OK = {"stock": 4}


def test_per_tool_precision_and_recall_hand_worked():
    said_no = render_execution_result({"error_tool_call": {"code": "INVALID_PARAMETERS", "message": "m"}})
    world_no = render_execution_result(ERR)  # the world's own wording, written by Rehearse
    said_ok = render_execution_result(OK)
    turns = [
        _turn("get", said_no, ERR, ErrorCode.TOOL_ERROR),   # tp
        _turn("get", world_no, ERR, ErrorCode.TOOL_ERROR),  # tp (any wording)
        _turn("get", said_ok, ERR, ErrorCode.TOOL_ERROR),   # fn: the rehearsed world said yes
        _turn("get", said_no, OK),                          # fp
        _turn("get", said_ok, OK),                          # tn
        _turn("put", "not a result", ERR, ErrorCode.TOOL_ERROR),  # unparseable: predicts no error -> fn
        _turn("put", said_ok, OK),                          # tn
    ]
    verdicts = [(t.call.name, *turn_error_verdict(t)) for t in turns]
    assert [v[1:] for v in verdicts] == [(True, True), (True, True), (False, True), (True, False), (False, False),
                                         (False, True), (False, False)]
    per = aggregate_errors(verdicts)
    assert (per["get"].precision, per["get"].recall) == (pytest.approx(2 / 3), pytest.approx(2 / 3))
    assert per["put"].precision is None and per["put"].recall == 0.0
    assert (per["all"].n, per["all"].tp, per["all"].fp, per["all"].fn) == (7, 2, 1, 2)
    m = error_metric_dict(per)
    assert m["fidelity/get/error_recall"] == pytest.approx(2 / 3) and m["fidelity/get/errors_real"] == 3.0
    assert "fidelity/put/error_precision" not in m  # undefined, not a silent 0
    assert m["fidelity/all/error_recall"] == pytest.approx(0.5)
    assert turn_error_verdict(Turn(role=Role.REHEARSE, prompt_ids=[], response_ids=[], logprobs=[], text="",
                                   temperature=1.0)) is None


def test_the_shadow_monitor_logs_error_recall_per_step():
    from envace.trainers.arms.shadow import ShadowResult, shadow_metrics
    from envace.types import Mode, Task, Trajectory

    said_no = render_execution_result({"error_tool_call": {"code": "X", "message": "m"}})
    traj = Trajectory(task=Task(uuid="t", tools=[], messages=[]), prompt_index=0, sample_index=0, mode=Mode.REHEARSE)
    for t in (_turn("get", said_no, ERR, ErrorCode.TOOL_ERROR), _turn("get", render_execution_result(OK), ERR),
              _turn("get", said_no, OK)):
        traj.add_turn(t)
    m = shadow_metrics([traj], [ShadowResult(rehearsed=1.0, real=0.0, calls=3, exact=[0.0, 0.0, 0.0])])
    assert (m["shadow/error_recall"], m["shadow/error_precision"]) == (0.5, 0.5)
    assert (m["shadow/errors_real"], m["shadow/errors_rehearsed"]) == (2.0, 2.0)
