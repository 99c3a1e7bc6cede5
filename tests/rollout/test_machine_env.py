"""The state machine in env mode (standard GRPO): calls executed by each episode's own real
Environment, multi-turn replay, malformed calls and tool crashes as error observations."""

from __future__ import annotations

import json

import pytest

from envace.config import RolloutConfig, SamplingConfig
from envace.rollout import run_rollout
from envace.types import ErrorCode, Mode, Role, TerminationReason, ToolCall

A = Role.ACT


def _cfg(**kw) -> RolloutConfig:
    base = dict(act=SamplingConfig(temperature=1.0, max_new_tokens=60), max_context_tokens=4096)
    base.update(kw)
    return RolloutConfig(**base)


def _tool_contents(traj) -> list:
    return [json.loads(m.content) for m in traj.messages if m.role == "tool"]


def test_env_mode_executes_every_call_in_the_episodes_own_env(tokenizer, tasks, kit):
    act = [kit.call_text("get_stock", item="apple"), "5 apples.",
           kit.call_text("add_stock", item="apple", qty=3), "Now 8."]
    engine = kit.ScriptedEngine(tokenizer, act=act, rehearse=None)
    factory = kit.CountingFactory(kit.ShopEnv)
    trajs = run_rollout(tasks, k=2, policy=engine, cfg=_cfg(), mode=Mode.ENV, env_factory=factory)
    assert len(factory.made) == 4 and all(env.resets == 1 for env in factory.made)
    assert all(role is A for roles in engine.roles_per_batch() for role in roles)

    for traj, env in zip(trajs[:2], factory.made[:2]):  # the two-turn task
        assert traj.termination is TerminationReason.FINAL_REPLY
        assert [c.key() for c in env.executed] == ['get_stock({"item": "apple"})',
                                                   'add_stock({"item": "apple", "qty": 3})']
        assert env.stock == {"apple": 8, "pear": 7}
        assert _tool_contents(traj) == [{"item": "apple", "stock": 5}, {"item": "apple", "stock": 8}]
        assert [m.content for m in traj.messages if m.role == "user"] == ["How many apples?", "Add 3 apples."]
        assert [t.user_turn for t in traj.turns] == [0, 0, 1, 1]
        assert traj.env_calls == 2 and traj.turns_of(Role.REHEARSE) == []
    for traj, _env in zip(trajs[2:], factory.made[2:]):  # the one-turn task stops after its only reply
        assert traj.termination is TerminationReason.FINAL_REPLY
        assert _tool_contents(traj) == [{"item": "apple", "stock": 1}] and traj.env_calls == 1
        assert traj.messages[-1].content == "5 apples."


@pytest.mark.parametrize("bad, code", [
    ('<tool_call>\n{"name": "sell", "arguments": {"item": "pear"}}\n</tool_call>', ErrorCode.UNKNOWN_TOOL),
    ('<tool_call>\n{"name": "add_stock", "arguments": {"item": "pear"}}\n</tool_call>', ErrorCode.INVALID_PARAMETERS),
    ('<tool_call>\n{"name": "get_stock", "arguments": {"item": "pear"\n</tool_call>', ErrorCode.JSON_DECODE),
    ('<tool_call>\n{"name": "get_stock", "arguments": {"item": "pear"}}', ErrorCode.INVALID_TOOL_CALL_FORMAT),
])
def test_malformed_calls_become_error_observations_and_the_episode_goes_on(tokenizer, tasks, kit, bad, code):
    engine = kit.ScriptedEngine(tokenizer, act=[bad, kit.call_text("get_stock", item="pear"), "9 pears."])
    factory = kit.CountingFactory(kit.ShopEnv)
    (traj,) = run_rollout(tasks[1:], k=1, policy=engine, cfg=_cfg(), mode=Mode.ENV, env_factory=factory)
    assert traj.termination is TerminationReason.FINAL_REPLY
    assert [t.parse_error for t in traj.turns] == [code, None, None]
    first, second = _tool_contents(traj)
    assert first["error_tool_call"]["code"] == code.value
    assert second == {"item": "pear", "stock": 9}
    assert [c.name for c in factory.made[0].executed] == ["get_stock"]  # the bad call never reached the env
    assert traj.env_calls == 1


def test_tool_errors_are_ordinary_observations(tokenizer, tasks, kit):
    act = [kit.call_text("explode"), kit.call_text("get_stock", item="kiwi"), "Sorry."]
    engine = kit.ScriptedEngine(tokenizer, act=act)
    (traj,) = run_rollout(tasks[1:], k=1, policy=engine, cfg=_cfg(), mode=Mode.ENV,
                          env_factory=kit.ShopEnv)
    assert traj.termination is TerminationReason.FINAL_REPLY
    crashed, unknown = (c["error_tool_call"] for c in _tool_contents(traj))
    assert crashed["code"] == "TOOL_ERROR" and "RuntimeError: backend down" in crashed["message"]
    assert unknown == {"code": "TOOL_ERROR", "message": "unknown item 'kiwi'"}
    assert traj.env_calls == 2


def test_several_calls_in_one_output_run_in_order(tokenizer, tasks, kit):
    calls = "\n".join([kit.call_text("add_stock", item="pear", qty=1), kit.call_text("get_stock", item="pear")])
    factory = kit.CountingFactory(kit.ShopEnv)
    (traj,) = run_rollout(tasks[1:], k=1, policy=kit.ScriptedEngine(tokenizer, act=[calls, "10."]), cfg=_cfg(),
                          mode=Mode.ENV, env_factory=factory)
    assert _tool_contents(traj) == [{"item": "pear", "stock": 10}, {"item": "pear", "stock": 10}]
    assert traj.turns[0].tool_calls == [ToolCall("add_stock", {"item": "pear", "qty": 1}),
                                        ToolCall("get_stock", {"item": "pear"})]


def test_turn_gate_decides_whether_the_next_user_turn_is_replayed(tokenizer, tasks, kit):
    seen = []

    def refuse(traj, user_turn):
        seen.append((traj.task.uuid, traj.sample_index, user_turn, traj.messages[-1].content))
        return False

    act = [kit.call_text("get_stock", item="apple"), "5 apples."]
    trajs = run_rollout(tasks, k=2, policy=kit.ScriptedEngine(tokenizer, act=act), cfg=_cfg(), mode=Mode.ENV,
                        env_factory=kit.ShopEnv, turn_gate=refuse)
    assert [t.termination for t in trajs] == [TerminationReason.REQUIRED_CHECK_FAILED] * 2 + \
        [TerminationReason.FINAL_REPLY] * 2  # the last turn of a task never asks the gate
    assert seen == [("two-turns", 0, 0, "5 apples."), ("two-turns", 1, 0, "5 apples.")]
    assert [m.content for m in trajs[0].messages if m.role == "user"] == ["How many apples?"]
