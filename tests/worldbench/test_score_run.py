"""`worldbench score` end to end on a hand-built data dir: the reference rows by hand, a tiny local model
through the Rehearse prompt (its prompt fitting the context), worldbench.json, MLflow, the store's read
side and the CLI's one-line errors."""

from __future__ import annotations

import json

import pytest

from envace.engines.slots import ModelSlot
from envace.store.session import read_only_session
from envace.store.worldbench_rows import worldbench_facets, worldbench_pairs, worldbench_runs
from envace.worldbench.config import ScoreConfig
from envace.worldbench.predict import CopyLast, TrainIndex, TypedEmpty, empty_of_schema, prompt_messages
from envace.worldbench.records import CallKind, Source, Split, Transition, write_transitions
from envace.worldbench.run import score, subset

TOOLS = [{"type": "function", "function": {"name": "get", "description": "Get an item.", "parameters": {
    "type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]}}},
         {"type": "function", "function": {"name": "put", "description": "Put an item.", "parameters": {
             "type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]}}}]


def _t(split, task, pos, tool, response, kind=CallKind.GOLD, is_error=False, schema=None, history=None):
    return Transition(id=f"world/d/{task}/{pos}/{kind.value}", source=Source.WORLD, domain="d", task_id=task,
                      split=split, position=pos, kind=kind, tools=TOOLS, history=history or [],
                      call={"name": tool, "arguments": {"id": f"i{pos}"}}, response=response, is_error=is_error,
                      result_schema=schema)


TRAIN = [_t(Split.TRAIN, "a", 0, "get", '{"item": "x", "n": 3}'),
         _t(Split.TRAIN, "a", 0, "get", "Error: no such id", CallKind.WRONG_ID, True),
         _t(Split.TRAIN, "a", 1, "put", '{"ok": true}')]
TEST = [_t(Split.TEST, "b", 0, "get", '{"item": "y", "n": 1}'),
        _t(Split.TEST, "b", 1, "get", '{"item": "y", "n": 2}'),
        _t(Split.TEST, "b", 1, "get", "Error: no such id", CallKind.WRONG_ID, True),
        _t(Split.TEST, "b", 2, "put", '{"ok": true}'),
        _t(Split.TEST, "b", 3, "del", '{"gone": 1}', schema={"type": "object", "properties": {
            "gone": {"type": "integer"}, "why": {"type": "string"}}})]


def test_reference_rows_by_hand():
    idx = TrainIndex(TRAIN)
    copy = CopyLast(TEST, idx)
    assert copy.value(TEST[0]) == {"item": "x", "n": 3}  # no earlier call in the task: train's first `get`
    assert copy.value(TEST[1]) == {"item": "y", "n": 1}  # the task's previous `get`
    assert copy.value(TEST[2]) == {"item": "y", "n": 1}  # a perturbed call copies the same way
    assert copy.value(TEST[3]) == {"ok": True}
    assert copy.value(TEST[4]) is None  # no `del` anywhere: nothing to copy (scored invalid)
    empty = TypedEmpty(idx)
    assert empty.value(TEST[0]) == {"item": "", "n": 0}
    assert empty.value(TEST[3]) == {"ok": False}
    assert empty.value(TEST[4]) == {"gone": 0, "why": ""}  # the declared result schema wins
    assert empty_of_schema({"type": "array"}) == [] and empty_of_schema(None) == ""


def test_few_shot_comes_from_train_and_alternates_gold_and_errors():
    cfg = ScoreConfig(few_shot_per_tool=2)
    user = prompt_messages(TEST[1], cfg, TrainIndex(TRAIN))[1]["content"]
    assert '"response": {"item": "x", "n": 3}' in user and "no such id" in user
    assert '"item": "y"' not in user  # nothing of the test task itself
    off = prompt_messages(TEST[1], ScoreConfig(few_shot=False), TrainIndex(TRAIN))[1]["content"]
    assert '"item": "x"' not in off


@pytest.fixture()
def data(tmp_path):
    write_transitions(tmp_path / "data" / "world" / "train.jsonl", TRAIN)
    write_transitions(tmp_path / "data" / "world" / "test.jsonl", TEST)
    return tmp_path


def test_score_reference_rows_writes_json_mlflow_and_store(data):
    cfg = ScoreConfig(data=str(data / "data"), out=str(data / "out"), bootstrap=50)
    res = score(cfg)
    saved = json.loads((data / "out" / "worldbench.json").read_text())
    assert saved["rows"].keys() == {"copy_last", "typed_empty"} and saved["mlflow_run_id"]
    copy = saved["rows"]["copy_last"]["aggregate"]["source"]["world"]
    # exact: TEST[3] only (1 of 5); json_valid 4/5 (nothing to copy for `del`); errors: none predicted
    assert copy["exact"] == pytest.approx(1 / 5) and copy["json_valid"] == pytest.approx(4 / 5)
    assert copy["error_recall"] == 0.0 and copy["error_precision"] is None
    import mlflow

    run = mlflow.tracking.MlflowClient(f"sqlite:///{data / 'out' / 'mlflow.db'}").get_run(res["mlflow_run_id"])
    assert run.data.metrics["copy_last/world/exact"] == pytest.approx(1 / 5)
    with read_only_session(res["store"]["url"]) as s:
        runs = dict(worldbench_runs(s))
        rid = res["store"]["run_ids"]["copy_last"]
        assert runs[rid] == "worldbench:copy_last"
        pairs = worldbench_pairs(s, rid)
        assert [p.transition for p in pairs] == [t.id for t in TEST]
        assert pairs[3].exact and pairs[3].predicted == {"ok": True} and pairs[2].real_error
        assert [p.transition for p in worldbench_pairs(s, rid, tool="put")] == [TEST[3].id]
        # leaf F1 by hand: 0 (x/3 vs y/1), 0.5 (item right, n wrong), 0 (vs an error), 1, 0 (invalid)
        assert [p.leaf_f1 for p in pairs] == [0.0, 0.5, 0.0, 1.0, 0.0]
        assert len(worldbench_pairs(s, rid, max_f1=0.4)) == 3
        assert worldbench_facets(s, rid) == (["world"], ["del", "get", "put"])
    score(cfg)  # a re-run replaces its rows instead of adding to them
    with read_only_session(res["store"]["url"]) as s:
        assert len(worldbench_pairs(s, res["store"]["run_ids"]["copy_last"])) == len(TEST)


def test_tiny_local_model_fits_its_context(data, tiny_dir):
    def run(max_prompt_tokens):
        cfg = ScoreConfig(data=str(data / "data"), out=str(data / "out"), model=ModelSlot.local(tiny_dir),
                          reference_rows=[], max_new_tokens=8, bootstrap=0, max_prompt_tokens=max_prompt_tokens,
                          tracking={"enabled": False})
        (name, row), = score(cfg)["rows"].items()
        assert name.startswith("model:") and row["n"] == len(TEST)
        return row, [json.loads(x) for x in open(row["scores_file"])]

    row, lines = run(None)  # the model's context (1024) minus max_new_tokens: every prompt fits
    assert row["n_prompt_too_long"] == 0 and all(x["predicted_text"] for x in lines)
    row, lines = run(16)  # not even the system prompt fits: nothing is generated, all scored invalid
    assert row["n_prompt_too_long"] == len(TEST)
    assert all(x["note"] == "prompt_too_long" and x["predicted_text"] == "" and not x["json_valid"] for x in lines)


def test_subset_is_seeded_and_keeps_file_order():
    a, b = subset(TEST, 3, 0), subset(TEST, 3, 0)
    assert [t.id for t in a] == [t.id for t in b] and len(a) == 3
    assert [t.id for t in a] == [t.id for t in TEST if t in a]
    assert subset(TEST, None, 0) == TEST


def _cli_error(*args: str, cwd) -> str:
    import os
    import subprocess
    import sys

    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("ENVACE_DEBUG", None)
    res = subprocess.run([sys.executable, "-m", "envace.cli", *args], cwd=cwd, env=env, capture_output=True,
                         text=True, timeout=600)
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: "), res.stderr[-2000:]
    assert "Traceback" not in lines[0]
    return lines[0]


def test_cli_errors_are_one_line(data):
    line = _cli_error("worldbench", "score", f"data={data / 'nope'}", cwd=data)
    assert "worldbench build" in line and "nope" in line
    assert "bogus" in _cli_error("worldbench", "score", "reference_rows=[bogus]", cwd=data)


def test_prompt_keeps_the_last_messages_and_cuts_long_ones():
    history = [{"role": "user", "content": f"message {i} " + "x" * 100} for i in range(6)]
    t = _t(Split.TEST, "b", 0, "get", '{"item": "y", "n": 1}', history=history)
    cfg = ScoreConfig(max_history_messages=2, max_message_chars=60, few_shot=False)
    user = prompt_messages(t, cfg, TrainIndex(TRAIN))[1]["content"]
    assert "message 4" in user and "message 5" in user and "message 3" not in user
    assert "x" * 60 not in user and "…" in user
    assert "message 0" not in prompt_messages(t, ScoreConfig(max_history_messages=0), TrainIndex(TRAIN))[1]["content"]
