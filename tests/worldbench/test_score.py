"""Worldbench scores on hand-worked pairs, the error predicate, and the bootstrap against a slow loop."""

from __future__ import annotations

import json

import numpy as np
import pytest

from envace.execution_result import is_error_value
from envace.worldbench.records import CallKind, Source, Split, Transition, target_value
from envace.worldbench.score import aggregate, score_transition, summarize


def _t(value_text: str, is_error: bool = False, tool: str = "f", source: str = "world", i: int = 0) -> Transition:
    return Transition(id=f"{source}/d/t/{i}/gold", source=Source(source), domain="d", task_id="t", split=Split.TEST,
                      position=i, kind=CallKind.GOLD, tools=[], history=[], call={"name": tool, "arguments": {}},
                      response=value_text, is_error=is_error)


def block(value) -> str:
    return f"<execution_result>\n{json.dumps(value)}\n</execution_result>"


def test_exact_after_canonicalisation():
    s = score_transition(_t('{"a": 1, "b": [1, 2]}'), block({"b": [1, 2], "a": 1.0}))
    assert (s.json_valid, s.exact, s.shape, s.leaf_f1) == (True, True, True, 1.0)


def test_partial_fields_f1_is_four_sevenths():
    # real leaves a=1 b="x" c=true d=null; predicted a=1 b="y" c=true: tp 2, P 2/3, R 2/4, F1 = 4/7
    s = score_transition(_t('{"a": 1, "b": "x", "c": true, "d": null}'), block({"a": 1, "b": "y", "c": True}))
    assert s.json_valid and not s.exact and not s.shape
    assert s.leaf_f1 == pytest.approx(4 / 7)


def test_shape_is_types_not_values():
    wrong_type = score_transition(_t('{"a": 1}'), block({"a": "1"}))
    assert (wrong_type.shape, wrong_type.leaf_f1, wrong_type.exact) == (False, 0.0, False)
    same_shape = score_transition(_t('{"xs": [1, 2, 3]}'), block({"xs": [5]}))
    assert (same_shape.shape, same_shape.leaf_f1, same_shape.exact) == (True, 0.0, False)
    bools = score_transition(_t('{"a": true}'), block({"a": 1}))  # true is not 1 in JSON
    assert (bools.shape, bools.exact) == (False, False)


def test_invalid_prediction_scores_zero_and_predicts_no_error():
    for text in ("not a block", '{"a": 1}', block({}), "<execution_result>\n{'a': 1}\n</execution_result>"):
        s = score_transition(_t('{"a": 1}', is_error=False), text)
        assert (s.json_valid, s.exact, s.shape, s.leaf_f1, s.pred_error) == (False, False, False, 0.0, False)


def test_error_agreement_precision_recall_by_hand():
    real_err = "Error: User not found"
    scores = [
        score_transition(_t(real_err, True, i=0), block({"error": "nope"})),  # TP
        score_transition(_t('{"ok": 1}', i=1), block({"error_tool_call": {"code": "X", "message": "m"}})),  # FP
        score_transition(_t(real_err, True, i=2), block({"ok": 1})),  # FN
        score_transition(_t('{"ok": 1}', i=3), block({"ok": 1})),  # TN
        score_transition(_t(real_err, True, i=4), "garbage"),  # FN (invalid predicts no error)
    ]
    assert [(s.real_error, s.pred_error) for s in scores] == [(True, True), (False, True), (True, False),
                                                               (False, False), (True, False)]
    summary = summarize(scores, n_boot=0)
    assert summary["error_precision"] == pytest.approx(1 / 2)  # 1 TP of 2 predicted errors
    assert summary["error_recall"] == pytest.approx(1 / 3)  # 1 TP of 3 real errors
    assert summary["exact"] == pytest.approx(1 / 5)
    no_pred = summarize([scores[2], scores[3]], n_boot=0)
    assert no_pred["error_precision"] is None and no_pred["error_recall"] == 0.0


def test_target_value_and_error_predicate():
    assert target_value('{"a": 1}', False) == {"a": 1}
    assert target_value("[1]", False) == [1]
    assert target_value("Roaming enabled successfully", False) == {"result": "Roaming enabled successfully"}
    assert target_value("3", False) == {"result": 3}
    assert target_value("{}", False) == {"result": {}}
    err = target_value("Error: Order not found", True)
    assert err == {"error_tool_call": {"code": "TOOL_ERROR", "message": "Error: Order not found"}}
    assert is_error_value(err) and is_error_value({"error": "x"}) and is_error_value([{"error": "x"}])
    assert not is_error_value({"result": "error"}) and not is_error_value(["error"]) and not is_error_value(None)


def _slow_boot(values: np.ndarray, n_boot: int, seed: int) -> list[float]:
    rng = np.random.default_rng(seed)
    means = []
    for _ in range(n_boot):
        idx = rng.integers(0, len(values), size=len(values))
        means.append(sum(values[i] for i in idx) / len(values))
    return [float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))]


def test_bootstrap_matches_a_slow_loop():
    rng = np.random.default_rng(3)
    scores = []
    for i in range(37):
        real = {"a": int(rng.integers(0, 3)), "b": int(rng.integers(0, 3))}
        pred = {"a": int(rng.integers(0, 3)), "b": int(rng.integers(0, 3))}
        scores.append(score_transition(_t(json.dumps(real), i=i), block(pred)))
    fast = summarize(scores, n_boot=300, seed=11)
    f1 = np.array([s.leaf_f1 for s in scores])
    assert fast["leaf_f1"] == pytest.approx(f1.mean())
    assert fast["leaf_f1_ci"] == pytest.approx(_slow_boot(f1, 300, 11))
    assert fast["leaf_f1_ci"][0] <= fast["leaf_f1"] <= fast["leaf_f1_ci"][1]


def test_aggregate_groups_by_source_domain_tool_kind():
    scores = [score_transition(_t('{"a": 1}', tool="f", source="world", i=0), block({"a": 1})),
              score_transition(_t('{"a": 1}', tool="g", source="world", i=1), block({"a": 2})),
              score_transition(_t('{"a": 1}', tool="f", source="bfcl", i=2), block({"a": 1}))]
    agg = aggregate(scores, n_boot=0)
    assert agg["all"]["exact"] == pytest.approx(2 / 3)
    assert agg["source"]["world"]["exact"] == pytest.approx(1 / 2)
    assert agg["tool"]["world/f"]["exact"] == 1.0 and agg["tool"]["world/g"]["exact"] == 0.0
    assert agg["tool"]["bfcl/f"]["n"] == 1 and agg["domain"]["world/d"]["n"] == 2
    assert agg["kind"]["world/gold"]["n"] == 2
