"""The prompted simulator in the frozen-simulator seat (rollout.mode=simulator, rollout.simulator_prompt=prompted):
its prompt (envace.roles.prompted_simulator through envace.rollout.simulator_seat), its lenient reader, and
simulator-mode episodes whose observations come from the simulator's JSON reply, checked by hand against a
stand-in chat endpoint (tests/prompted_endpoint.py) and against a token-level engine; the simulator's turns
are stored as they happened and are never training rows."""

from __future__ import annotations

import json

import pytest
from prompted_endpoint import CALL_HEAD, call_in, prompted_endpoint

from envace.config import RolloutConfig, SamplingConfig
from envace.engines.slots import ModelSlot
from envace.roles.act import chat_ids
from envace.roles.prompted_simulator import NO_JSON, SYSTEM_PROMPT, parse_simulated, simulated_observation
from envace.roles.prompts import SEC_CURRENT
from envace.rollout import run_rollout
from envace.rollout.simulator_seat import prompted_seat_messages, simulator_engine
from envace.trainers.config import TrainConfig
from envace.trainers.train_rows import build_rows
from envace.types import ErrorCode, Message, Mode, Role, TerminationReason, ToolCall

A, R = Role.ACT, Role.REHEARSE
CFG = RolloutConfig(mode="simulator", simulator_prompt="prompted", max_context_tokens=8192,
                    act=SamplingConfig(temperature=0.7, max_new_tokens=60),
                    rehearse=SamplingConfig(temperature=0.3, max_new_tokens=90))
# what the stand-in simulator replies to each call: prose around JSON, a fenced block, an error
REPLIES = {"get_stock": 'Sure, the tool returns {"item": "apple", "stock": 45} here.',
           "add_stock": '```json\n{"item": "apple", "stock": 48}\n```'}


@pytest.fixture
def happy_act(kit):
    return [kit.call_text("get_stock", item="apple"), "There are 45.",
            kit.call_text("add_stock", item="apple", qty=3), "Done."]


@pytest.mark.parametrize(("reply", "content", "error"), [
    ('{"stock": 3}', {"stock": 3}, None),
    ('Here: ```json\n[1, 2]\n```', [1, 2], None),
    ("<execution_result>\n{\"a\": 1}\n</execution_result>", {"a": 1}, None),
    ("7", {"result": 7}, None),
    ('{"error": "no such item"}', {"error": "no such item"}, ErrorCode.REHEARSED_ERROR),
    ("I am not sure what the tool says.", None, ErrorCode.NO_EXECUTION_RESULT_TAG),
])
def test_replies_become_observations(reply, content, error):
    obs = simulated_observation(reply)
    assert (obs.content, obs.error, obs.source) == (content, error, Role.REHEARSE)
    assert parse_simulated(reply) == content
    if content is None:
        assert obs.detail == NO_JSON


def test_seat_prompt_holds_schemas_conversation_few_shot_and_call(tasks):
    task = tasks[0]
    history = [Message("system", "You manage a shop."), Message("user", "How many apples?"),
               Message("assistant", "", tool_calls=[ToolCall("get_stock", {"item": "pear"})]),
               Message("tool", '{"item": "pear", "stock": 7}', name="get_stock")]
    msgs = prompted_seat_messages(task, history, ToolCall("get_stock", {"item": "apple"}), few_shot=True)
    assert msgs[0] == {"role": "system", "content": SYSTEM_PROMPT} and len(msgs) == 2
    schemas = "\n".join(json.dumps(t["function"], sort_keys=True) for t in task.tools)
    assert msgs[1]["content"] == (
        f"Tool schemas:\n{schemas}\n\n"
        "Earlier responses of get_stock (other sessions):\n"
        '{"arguments": {"item": "apple"}, "response": {"item": "apple", "stock": 5}}\n'
        '{"arguments": {"item": "apple"}, "response": {"item": "apple", "stock": 5}}\n\n'
        "Conversation so far:\nuser: How many apples?\n"
        'assistant: [calls get_stock with {"item": "pear"}]\n'
        'tool get_stock: {"item": "pear", "stock": 7}\n\n'
        f'{CALL_HEAD}{{"arguments": {{"item": "apple"}}, "name": "get_stock"}}\n\n'
        "Return the tool's JSON response.")
    plain = prompted_seat_messages(task, history, ToolCall("add_stock", {"item": "apple", "qty": 1}), few_shot=True)
    assert "Earlier responses" not in plain[1]["content"]  # no same-tool reference pair
    off = prompted_seat_messages(task, history, ToolCall("get_stock", {"item": "apple"}), few_shot=False)
    assert "Earlier responses" not in off[1]["content"] and "You manage a shop." not in off[1]["content"]


def test_endpoint_simulator_writes_observations_from_its_json_reply(tokenizer, tasks, kit, happy_act):
    policy = kit.ScriptedEngine(tokenizer, act=happy_act, rehearse=None)  # must never be asked to rehearse
    with prompted_endpoint(lambda name, args: REPLIES[name]) as (url, requests):
        frozen = simulator_engine(ModelSlot.endpoint(url, "any-chat-model", max_retries=0))
        trajs = run_rollout(tasks, k=2, policy=policy, simulator=frozen, cfg=CFG, mode=Mode.SIMULATOR, seed=5)
    two = trajs[0]
    assert two.termination is TerminationReason.FINAL_REPLY and two.env_calls == 0
    assert [t.role for t in two.turns] == [A, R, A, A, R, A]
    get, add = two.turns_of(R)
    # hand-checked: the values inside the two replies, nothing else
    assert get.observation.content == {"item": "apple", "stock": 45} and get.observation.ok
    assert add.observation.content == {"item": "apple", "stock": 48}
    assert [m.content for m in two.messages if m.role == "tool"] == ['{"item": "apple", "stock": 45}',
                                                                     '{"item": "apple", "stock": 48}']
    # the stored turns are what happened: the raw reply, the call, no policy tokens, never a training row
    assert (get.text, add.text) == (REPLIES["get_stock"], REPLIES["add_stock"])
    assert get.call == ToolCall("get_stock", {"item": "apple"}) and not get.trainable and get.response_ids == []
    rows = build_rows(trajs)
    assert rows and all(r.turn.role is A for r in rows)
    assert len(rows) == sum(len(t.turns_of(A)) for t in trajs)
    # one request per simulated call, each the prompted layout, sampled as rollout.rehearse says
    assert len(requests) == sum(len(t.turns_of(R)) for t in trajs) == 2 * (2 + 1)
    for body in requests:
        assert body["model"] == "any-chat-model" and body["messages"][0]["content"] == SYSTEM_PROMPT
        assert body["temperature"] == 0.3 and body["max_tokens"] == 90 and "stop" not in body
        assert SEC_CURRENT not in body["messages"][1]["content"]
    assert len({b["seed"] for b in requests}) == len(requests)
    assert [call_in(b["messages"][1]["content"])[0] for b in requests].count("add_stock") == 2


def test_a_rehearse_prompt_simulator_is_unchanged_by_default(tokenizer, tasks, kit, happy_act):
    frozen = kit.ScriptedEngine(tokenizer, act=None, rehearse=kit.stock_result)  # answers Rehearse prompts only
    policy = kit.ScriptedEngine(tokenizer, act=happy_act, rehearse=None)
    cfg = CFG.model_copy(update={"simulator_prompt": "rehearse"})
    trajs = run_rollout(tasks, k=1, policy=policy, simulator=frozen, cfg=cfg, mode=Mode.SIMULATOR)
    assert all(t.termination is TerminationReason.FINAL_REPLY for t in trajs)


def test_token_level_simulator_gets_the_prompted_chat_and_its_errors_are_read(tokenizer, tasks, kit, happy_act):
    """A local simulator renders the prompted chat with its own template; a `{"error": ...}` reply is a rehearsed
    error, which `error_observation=end_rehearsed` ends on, as a Rehearse `error_tool_call` would."""
    def tool(prompt: str, _position: int) -> str:
        assert SYSTEM_PROMPT.splitlines()[0] in prompt and SEC_CURRENT not in prompt
        name, args = call_in(prompt.split("<|im_start|>user\n", 1)[1].split("<|im_end|>", 1)[0])
        return '{"error": "item not stocked"}' if name == "add_stock" else f'{{"item": "{args["item"]}", "stock": 45}}'

    frozen = kit.ScriptedEngine(tokenizer, act=tool, rehearse=None)
    policy = kit.ScriptedEngine(tokenizer, act=happy_act, rehearse=None)
    cfg = CFG.model_copy(update={"error_observation": "end_rehearsed", "few_shot": False})
    two, one = run_rollout(tasks, k=1, policy=policy, simulator=frozen, cfg=cfg, mode=Mode.SIMULATOR)
    assert one.termination is TerminationReason.FINAL_REPLY
    assert two.termination is TerminationReason.REHEARSE_ERROR
    get, add = two.turns_of(R)
    assert get.observation.content == {"item": "apple", "stock": 45}
    assert add.observation.content == {"error": "item not stocked"}
    assert add.observation.error is ErrorCode.REHEARSED_ERROR
    # the prompt ids stored are the prompted chat the simulator was given, rendered by its template
    history = two.messages[:2]  # system, user: the conversation before the Act output that made the call
    expected = chat_ids(tokenizer, prompted_seat_messages(two.task, history, get.call, few_shot=False))
    assert get.prompt_ids == expected and get.response_ids and not get.trainable
    assert all(r.turn.role is A for r in build_rows([two, one]))


def test_prompted_simulator_prompt_needs_simulator_mode():
    with pytest.raises(ValueError, match="rollout.simulator_prompt='prompted' prompts the frozen simulator"):
        TrainConfig.model_validate({"model": "/m", "rollout": {"simulator_prompt": "prompted"}})
    cfg = TrainConfig.model_validate({"model": "/m", "simulator": {"base_url": "http://h:1/v1", "model": "m"},
                                      "rollout": {"mode": "simulator", "simulator_prompt": "prompted"}})
    assert cfg.rollout.simulator_prompt == "prompted"
    with pytest.raises(ValueError, match="simulator_prompt"):
        RolloutConfig(simulator_prompt="simia")
