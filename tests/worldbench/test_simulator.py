"""The prompted simulator: envace's own system prompt over any chat model. Its prompt holds every tool schema,
the conversation and the call (and only train-split few-shot); replies are read for their JSON value; and it runs
as a worldbench row against a real `envace serve` endpoint (the tiny model on 127.0.0.1, as the server tests
start it), whose every
prediction equals the same model's reply sampled in-process with the same seed."""

from __future__ import annotations

import json

import pytest

from envace.engines.chat_model import LocalChatModel
from envace.engines.server import background_server, create_app
from envace.engines.slots import ModelSlot
from envace.execution_result import render_execution_result
from envace.worldbench.config import ScoreConfig
from envace.worldbench.predict import TrainIndex
from envace.worldbench.records import CallKind, Source, Split, Transition, write_transitions
from envace.worldbench.run import score
from envace.worldbench.simulator import (
    SIMULATOR_SYSTEM_PROMPT,
    as_rehearse_text,
    parse_simulated,
    simulator_messages,
)

TOOLS = [{"type": "function", "function": {"name": "get", "description": "Get an item.", "parameters": {
    "type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]}}},
         {"type": "function", "function": {"name": "put", "description": "Store an item.", "parameters": {
             "type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]}}}]


def _t(split, task, pos, tool, response, history=(), kind=CallKind.GOLD, is_error=False):
    return Transition(id=f"world/d/{task}/{pos}/{kind.value}", source=Source.WORLD, domain="d", task_id=task,
                      split=split, position=pos, kind=kind, tools=TOOLS, history=list(history),
                      call={"name": tool, "arguments": {"id": f"i{pos}"}}, response=response, is_error=is_error)


ASK = {"role": "user", "content": "Fetch i0 then store it."}
TRAIN = [_t(Split.TRAIN, "a", 0, "get", '{"item": "TRAINVALUE"}', [ASK])]
TEST = [_t(Split.TEST, "b", 0, "get", '{"item": "x"}', [ASK]),
        _t(Split.TEST, "b", 1, "put", '{"ok": true}', [ASK, {"role": "assistant", "content": "", "tool_calls": [
            {"id": "c0", "type": "function", "function": {"name": "get", "arguments": '{"id": "i0"}'}}]},
            {"role": "tool", "tool_call_id": "c0", "name": "get", "content": '{"item": "x"}'}])]


@pytest.mark.parametrize(("reply", "value"), [
    ('{"a": 1}', {"a": 1}),
    ('```json\n{"a": [1, 2]}\n```', {"a": [1, 2]}),
    ("<execution_result>\n[1]\n</execution_result>", [1]),
    ('Sure! The tool returns {"ok": true, "n": 2} for this call.', {"ok": True, "n": 2}),
    ("<think>maybe {\"no\": 1}</think>{\"yes\": 1}", {"yes": 1}),
    ("42", {"result": 42}),
    ("{}", {"result": {}}),  # as an empty real response is recorded (records.target_value)
    ("I cannot answer that.", None),
])
def test_replies_are_read_for_their_json_value(reply, value):
    assert parse_simulated(reply) == value
    assert as_rehearse_text(reply) == (reply if value is None else render_execution_result(value))


def test_prompt_holds_schemas_conversation_call_and_train_few_shot_only():
    msgs = simulator_messages(TEST[1], ScoreConfig(), TrainIndex(TRAIN + TEST))
    assert msgs[0] == {"role": "system", "content": SIMULATOR_SYSTEM_PROMPT}
    user = msgs[1]["content"]
    for tool in TOOLS:
        assert json.dumps(tool["function"], sort_keys=True) in user  # every schema, not only the called one
    assert "user: Fetch i0 then store it." in user and 'tool get: {"item": "x"}' in user
    assert user.rstrip().endswith("Return the tool's JSON response.")
    assert json.dumps(TEST[1].call, sort_keys=True) in user
    get_prompt = simulator_messages(TEST[0], ScoreConfig(), TrainIndex(TRAIN))[1]["content"]
    assert "TRAINVALUE" in get_prompt  # a same-tool train example
    assert "TRAINVALUE" not in simulator_messages(TEST[0], ScoreConfig(few_shot=False), TrainIndex(TRAIN))[1]["content"]


@pytest.fixture(scope="module")
def served(world_tiny_dir):  # tests/conftest.py's tiny_dir spends > 1,024 tokens on this prompt
    chat = LocalChatModel.from_dir(world_tiny_dir, name="tiny", device="cpu")
    with background_server(create_app(chat=chat)) as url:
        yield url, chat


def test_prompted_simulator_row_against_envace_serve(served, tmp_path):
    url, chat = served
    write_transitions(tmp_path / "data" / "world" / "train.jsonl", TRAIN)
    write_transitions(tmp_path / "data" / "world" / "test.jsonl", TEST)
    cfg = ScoreConfig(data=str(tmp_path / "data"), out=str(tmp_path / "out"), reference_rows=[], bootstrap=0,
                      model=ModelSlot.endpoint(f"{url}/v1", "tiny", max_retries=0, temperature=1.0),
                      model_prompt="simulator",
                      max_new_tokens=24, tracking={"enabled": False})
    (name, row), = score(cfg)["rows"].items()
    assert name == f"simulator:tiny @ {url}/v1" and row["n"] == len(TEST)
    lines = [json.loads(x) for x in open(row["scores_file"])]
    index = TrainIndex(TRAIN)
    for t, line in zip(TEST, lines):
        from envace.rollout.seeds import derive_seed

        choices, _ = chat.generate(simulator_messages(t, cfg, index), temperature=1.0, max_tokens=24,
                                   seed=derive_seed(0, "worldbench", t.id) % (2**31))
        assert line["predicted_text"] == as_rehearse_text(choices[0].content) and line["predicted_text"].strip()
    assert lines[0]["predicted_text"] != lines[1]["predicted_text"]  # sampled text, seeded per transition

def test_an_unreachable_simulator_endpoint_stops_the_run(tmp_path):
    write_transitions(tmp_path / "data" / "world" / "test.jsonl", TEST)
    cfg = ScoreConfig(data=str(tmp_path / "data"), out=str(tmp_path / "out"), reference_rows=[],
                      model=ModelSlot.endpoint("http://127.0.0.1:9/v1", "m", max_retries=0, timeout_s=2),
                      model_prompt="simulator", tracking={"enabled": False})
    with pytest.raises(Exception, match="127.0.0.1:9"):
        score(cfg)


def test_simulator_needs_a_slot_and_is_not_a_wm2real_world_model():
    with pytest.raises(ValueError, match="model_prompt=simulator needs a model slot"):
        ScoreConfig(model_prompt="simulator")
    with pytest.raises(ValueError, match="prompted simulator is a worldbench row only"):
        ScoreConfig(model={"base_url": "http://h:1/v1", "model": "m"}, model_prompt="simulator", wm2real=True,
                    act_checkpoint="/m")
