"""Worldbench readers check each record's shape on load and name the file and line: a history or tools entry
that is not an object, a message with a bad role or content, a lone surrogate, a line over the record budget,
bytes that are not UTF-8 and nesting too deep to decode. An empty test split is refused, not scored as 0
transitions. Scoring runs the real reference rows on what loads."""

from __future__ import annotations

import json

import pytest

from envace.worldbench.config import ScoreConfig
from envace.worldbench.records import CallKind, Source, Split, Transition, read_transitions, write_transitions
from envace.worldbench.run import score

TOOL = {"type": "function", "function": {"name": "get", "parameters": {"type": "object", "properties": {}}}}


def _t(i: int = 0, **kw) -> Transition:
    base = dict(id=f"world/d/t/{i}/gold", source=Source.WORLD, domain="d", task_id="t", split=Split.TEST,
                position=i, kind=CallKind.GOLD, tools=[TOOL], history=[{"role": "user", "content": "hi"}],
                call={"name": "get", "arguments": {"id": "a"}}, response='{"ok": true}', is_error=False)
    return Transition(**{**base, **kw})


def _write_with_bad_second_line(path, edit) -> None:
    bad = _t(1).to_dict()
    edit(bad)
    path.write_text(json.dumps(_t(0).to_dict()) + "\n" + json.dumps(bad) + "\n")


@pytest.mark.parametrize(("edit", "needle"), [
    (lambda d: d.update(history=[5]), "field 'history[0]' must be a message object, got int"),
    (lambda d: d.update(tools=[5]), "field 'tools[0]' must be a tool object, got int"),
    (lambda d: d.update(tools=[{"type": "function", "function": {"name": 3}}]), "field 'tools[0].function.name'"),
    (lambda d: d.update(history=[{"role": "robot", "content": "x"}]), "field 'history[0].role' is 'robot'"),
    (lambda d: d.update(history=[{"role": "user", "content": 7}]), "field 'history[0].content' must be a string"),
    (lambda d: d.update(history=[{"role": "assistant", "tool_calls": [4]}]), "field 'history[0].tool_calls[0]'"),
    (lambda d: d.update(history=[{"role": "user", "content": "a\ud800"}]),
     "field 'history[0].content' holds a lone surrogate"),
    (lambda d: d.update(meta=[1]), "field 'meta' must be dict"),
    (lambda d: d.update(result_schema="x"), "field 'result_schema' must be an object or null"),
    (lambda d: d.update(id=5), "field 'id' must be str"),
])
def test_a_bad_record_is_refused_on_load_naming_file_line_and_field(tmp_path, edit, needle):
    p = tmp_path / "test.jsonl"
    _write_with_bad_second_line(p, edit)
    with pytest.raises(ValueError) as err:
        read_transitions(p)
    msg = str(err.value)
    assert msg.startswith(f"{p}:2: ") and needle in msg and "\n" not in msg, msg


@pytest.mark.parametrize(("raw", "needle"), [
    (b'{"id": "caf\xe9"}\n', "not UTF-8 (byte 0xe9 at column 12)"),
    (b"[" * 100_000 + b"]" * 100_000 + b"\n", "nested too deeply"),
])
def test_undecodable_lines_name_the_file_and_line(tmp_path, raw, needle):
    p = tmp_path / "test.jsonl"
    p.write_bytes(json.dumps(_t(0).to_dict()).encode() + b"\n" + raw)
    with pytest.raises(ValueError) as err:
        read_transitions(p)
    assert str(err.value).startswith(f"{p}:2: ") and needle in str(err.value), str(err.value)


def test_a_line_over_the_record_budget_is_refused_before_decoding(tmp_path, monkeypatch):
    p = tmp_path / "test.jsonl"
    write_transitions(p, [_t(0), _t(1, response="x" * 5000)])
    monkeypatch.setenv("ENVACE_MAX_RECORD_BYTES", "3000")
    with pytest.raises(ValueError) as err:
        read_transitions(p)
    msg = str(err.value)
    assert msg.startswith(f"{p}:2: ") and "over the limit of 3000" in msg and "ENVACE_MAX_RECORD_BYTES" in msg


def _data(tmp_path, test: list[Transition]):
    root = tmp_path / "data"
    write_transitions(root / "world" / "train.jsonl", [_t(9, split=Split.TRAIN)])
    write_transitions(root / "world" / "test.jsonl", test)
    return root


def test_an_empty_test_split_is_refused_not_scored_as_zero(tmp_path):
    root = _data(tmp_path, [])
    with pytest.raises(ValueError) as err:
        score(ScoreConfig(data=str(root), out=str(tmp_path / "out"), bootstrap=10, tracking={"enabled": False}))
    assert f"{root / 'world' / 'test.jsonl'} holds no transitions" in str(err.value)
    assert not (tmp_path / "out" / "worldbench.json").exists()


def test_records_that_load_are_scored(tmp_path):
    root = _data(tmp_path, [_t(0), _t(1)])
    res = score(ScoreConfig(data=str(root), out=str(tmp_path / "out"), bootstrap=10, tracking={"enabled": False}))
    assert res["n_test"] == 2 and all(row["n"] == 2 for row in res["rows"].values())
