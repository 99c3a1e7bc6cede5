"""Transition files (round trip, one-line errors naming the file, line and field) and the perturbations
on hand-worked calls."""

from __future__ import annotations

import json
import random

import pytest

from envace.worldbench.perturb import other_id, perturb
from envace.worldbench.records import CallKind, Source, Split, Transition, read_transitions, write_transitions

TOOLS = [{"type": "function", "function": {"name": "get_order", "parameters": {
    "type": "object", "properties": {"order_id": {"type": "string"}, "qty": {"type": "integer"},
                                     "cabin": {"type": "string", "enum": ["economy", "business"]},
                                     "account": {"type": "string", "description": "account id"},
                                     "note": {"type": "string"}},
    "required": ["order_id", "qty"]}}}]


def _t(**kw) -> Transition:
    base = dict(id="world/d/t/0/gold", source=Source.WORLD, domain="d", task_id="t", split=Split.TEST, position=0,
                kind=CallKind.GOLD, tools=TOOLS, history=[{"role": "user", "content": "hi"}],
                call={"name": "get_order", "arguments": {"order_id": "#W1"}}, response='{"ok": true}', is_error=False)
    base.update(kw)
    return Transition(**base)


def test_round_trip_is_byte_stable(tmp_path):
    ts = [_t(), _t(id="world/d/t/1/gold", position=1, response="Error: no", is_error=True)]
    p = tmp_path / "test.jsonl"
    write_transitions(p, ts)
    first = p.read_bytes()
    back = read_transitions(p)
    assert [b.to_dict() for b in back] == [t.to_dict() for t in ts]
    assert back[1].value == {"error_tool_call": {"code": "TOOL_ERROR", "message": "Error: no"}}
    write_transitions(p, back)
    assert p.read_bytes() == first


@pytest.mark.parametrize("edit, needle", [
    (lambda d: d.pop("call"), "missing field(s) ['call']"),
    (lambda d: d.update(call={"name": "f"}), "field 'call' must be"),
    (lambda d: d.update(is_error="no"), "field 'is_error' must be bool"),
    (lambda d: d.update(kind="weird"), "valid sources"),
])
def test_bad_line_names_file_line_and_field(tmp_path, edit, needle):
    good = _t().to_dict()
    bad = _t().to_dict()
    edit(bad)
    p = tmp_path / "test.jsonl"
    p.write_text(json.dumps(good) + "\n" + json.dumps(bad) + "\n")
    with pytest.raises(ValueError) as exc:
        read_transitions(p)
    assert f"{p}:2" in str(exc.value) and needle in str(exc.value)


def test_other_id_by_hand():
    assert other_id("#W2378156") == "#W2378601"  # last three digits 1,5,6 -> 6,0,1
    assert other_id("a1") == "a6"
    assert other_id("PEP4EX") == "PEP4EX_x9"


def test_perturbations_by_hand():
    call = {"name": "get_order", "arguments": {"order_id": "#W12", "qty": 3, "cabin": "economy", "note": "n1"}}
    rng = random.Random(0)
    assert perturb(CallKind.WRONG_ID, call, TOOLS, rng) == {
        "name": "get_order", "arguments": {**call["arguments"], "order_id": "#W67"}}  # 'note' is no id
    out = perturb(CallKind.OUT_OF_RANGE, call, TOOLS, random.Random(1))
    changed = {k for k in call["arguments"] if out["arguments"][k] != call["arguments"][k]}
    assert len(changed) == 1 and changed <= {"qty", "cabin"}
    k = changed.pop()
    assert out["arguments"][k] == (-999 if k == "qty" else "not_economy")
    missing = perturb(CallKind.MISSING_ARG, call, TOOLS, random.Random(0))["arguments"]
    assert set(call["arguments"]) - set(missing) in ({"order_id"}, {"qty"})
    # an id named only by its description, and integer ids
    assert perturb(CallKind.WRONG_ID, {"name": "get_order", "arguments": {"account": "a3"}}, TOOLS,
                   rng)["arguments"] == {"account": "a8"}
    assert perturb(CallKind.WRONG_ID, {"name": "x", "arguments": {"ticket_id": 1234}}, [], rng)["arguments"] == {
        "ticket_id": 1789}


def test_not_applicable_is_none():
    call = {"name": "get_order", "arguments": {"note": "x"}}
    for kind in (CallKind.WRONG_ID, CallKind.OUT_OF_RANGE, CallKind.MISSING_ARG):
        assert perturb(kind, call, TOOLS, random.Random(0)) is None
    with pytest.raises(ValueError, match="not a perturbation"):
        perturb(CallKind.GOLD, call, TOOLS, random.Random(0))
