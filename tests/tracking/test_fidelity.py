"""Rehearsal fidelity scores on hand-worked examples."""

from __future__ import annotations

import pytest

from envace.fidelity import (
    aggregate_by_tool,
    fidelity_metric_dict,
    fidelity_metrics,
    field_f1,
    parse_rehearsed,
)


def R(body: str) -> str:
    """A well-formed Rehearse output around `body` (the only text the strict parser accepts)."""
    return f"<execution_result>\n{body}\n</execution_result>"


def test_exact_and_partial_matches_by_hand():
    real = {"id": 7, "status": "pending", "items": [{"sku": "a"}, {"sku": "b"}]}
    same = ('<execution_result>\n{"items": [{"sku": "a"}, {"sku": "b"}], "status": "pending", "id": 7.0}\n'
            "</execution_result>")
    assert fidelity_metrics(same, real) == {"json_valid": True, "schema_ok": True, "exact_match": True, "field_f1": 1.0}
    # leaves: id, status, items[0].sku, items[1].sku -> 3 of 4 agree: P = R = 3/4
    off = R('{"id": 7, "status": "shipped", "items": [{"sku": "a"}, {"sku": "b"}]}')
    s = fidelity_metrics(off, real)
    assert (s["json_valid"], s["schema_ok"], s["exact_match"]) == (True, True, False)
    assert s["field_f1"] == pytest.approx(0.75)
    # one extra field: 4 shared of 5 predicted -> P = 4/5, R = 1, F1 = 8/9; the shape differs
    extra = R('{"id": 7, "status": "pending", "eta": 3, "items": [{"sku": "a"}, {"sku": "b"}]}')
    s = fidelity_metrics(extra, real)
    assert s["field_f1"] == pytest.approx(8 / 9) and s["schema_ok"] is False


def test_bools_are_not_numbers_and_bad_output_scores_zero():
    assert fidelity_metrics(R('{"ok": 1}'), {"ok": True})["exact_match"] is False
    assert fidelity_metrics(R('{"ok": true}'), {"ok": True})["exact_match"] is True
    bad_outputs = ("<execution_result>\n{oops\n</execution_result>", "", None, 42,
                   "<execution_result></execution_result>")
    for bad in bad_outputs:
        assert fidelity_metrics(bad, {"a": 1}) == {"json_valid": False, "schema_ok": False, "exact_match": False,
                                                   "field_f1": 0.0}
    assert parse_rehearsed(R("[1, 2]")) == (True, [1, 2])
    assert field_f1({}, {}) == 1.0 and field_f1([], {"a": 1}) == 0.0


def test_result_schema_is_checked_when_given():
    schema = {"type": "object", "required": ["id"], "properties": {"id": {"type": "integer"}}}
    assert fidelity_metrics(R('{"id": 3, "more": 1}'), {"id": 3}, schema)["schema_ok"] is True
    assert fidelity_metrics(R('{"id": "3"}'), {"id": 3}, schema)["schema_ok"] is False
    with pytest.raises(ValueError, match="not a valid JSON Schema"):
        fidelity_metrics(R('{"id": 3}'), {"id": 3}, {"type": 12})


def test_aggregate_per_tool():
    a = fidelity_metrics(R('{"x": 1}'), {"x": 1})
    b = fidelity_metrics(R('{"x": 2}'), {"x": 1})
    c = fidelity_metrics("nope", {"x": 1})
    agg = aggregate_by_tool([("get", a), ("get", b), ("put", c)])
    assert list(agg) == ["get", "put"]
    assert (agg["get"].n, agg["get"].exact_match, agg["get"].json_valid) == (2, 0.5, 1.0)
    m = fidelity_metric_dict(agg)
    assert m["fidelity/get/exact_match"] == 0.5 and m["fidelity/put/json_valid"] == 0.0
    assert m["fidelity/all/exact_match"] == pytest.approx(1 / 3) and m["fidelity/all/n"] == 3.0
