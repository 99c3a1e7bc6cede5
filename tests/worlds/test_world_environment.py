"""WorldEnvironment at the boundary: every bad call is an error observation, never an exception."""

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from envace.types import ErrorCode, Role, ToolCall
from envace.worlds import WorldEnvironment, generate_task, generate_tasks
from envace.worlds.shop.tools import ShopTools


@pytest.fixture
def shop_env():
    import random

    task = generate_task("shop", "check", ["apple"], random.Random(0), uuid="t")
    env = WorldEnvironment()
    env.reset(task)
    return env


def test_tool_refusal_becomes_tool_error_observation(shop_env):
    before = shop_env.state_hash()
    obs = shop_env.execute(ToolCall("get_stock", {"item": "kiwi"}))
    assert obs.error is ErrorCode.TOOL_ERROR and obs.source is Role.ENV
    assert "unknown item 'kiwi'" in obs.content["error"] and "apple" in obs.content["error"]
    assert json.loads(obs.to_text()) == obs.content
    assert shop_env.state_hash() == before


def test_tool_exception_of_any_kind_becomes_an_observation(shop_env, monkeypatch):
    def boom(self, item):
        raise ZeroDivisionError("division by zero in a tool")

    monkeypatch.setattr(ShopTools, "get_stock", boom)
    obs = shop_env.execute(ToolCall("get_stock", {"item": "apple"}))
    assert obs.error is ErrorCode.TOOL_ERROR
    assert obs.content == {"error": "division by zero in a tool"}


@pytest.mark.parametrize("call, code", [
    (ToolCall("fly", {}), ErrorCode.UNKNOWN_TOOL),
    (ToolCall("deposit", {"account": "a1", "amount": 3}), ErrorCode.UNKNOWN_TOOL),  # another domain's tool
    (ToolCall("add_stock", {"item": "apple"}), ErrorCode.INVALID_PARAMETERS),
    (ToolCall("add_stock", {"item": "apple", "qty": "12"}), ErrorCode.INVALID_PARAMETERS),
    (ToolCall("add_stock", {"item": "apple", "qty": True}), ErrorCode.INVALID_PARAMETERS),
    (ToolCall("add_stock", {"item": "apple", "qty": 2, "note": "x"}), ErrorCode.INVALID_PARAMETERS),
    (ToolCall("add_stock", {"item": "apple", "qty": 0}), ErrorCode.TOOL_ERROR),
    (ToolCall("cancel_order", {"order": "o99"}), ErrorCode.TOOL_ERROR),
])
def test_bad_calls_are_classified(shop_env, call, code):
    obs = shop_env.execute(call)
    assert obs.error is code
    assert isinstance(obs.content["error"], str) and obs.content["error"]


def test_counts_calls_and_hashes_state(shop_env):
    h0 = shop_env.state_hash()
    assert shop_env.execute(ToolCall("get_stock", {"item": "apple"})).ok
    assert shop_env.state_hash() == h0  # a read changes nothing
    obs = shop_env.execute(ToolCall("add_stock", {"item": "apple", "qty": 5}))
    assert obs.ok and obs.content == {"ok": True, "item": "apple", "added": 5}
    assert shop_env.state_hash() != h0
    shop_env.execute(ToolCall("nope", {}))
    assert shop_env.calls_executed == 3
    shop_env.reset(shop_env.task)
    assert shop_env.calls_executed == 0 and shop_env.state_hash() == h0


def test_reset_needs_a_world_task():
    task = generate_tasks(1, "train", 0)[0]
    task.initial_state = None
    with pytest.raises(ValueError, match="no initial_state"):
        WorldEnvironment().reset(task)


def test_final_reward_refuses_a_trajectory_of_another_task(traj):
    a, b = generate_tasks(2, "train", 0)
    env = WorldEnvironment()
    env.reset(a)
    with pytest.raises(ValueError, match="trajectory is for task"):
        env.final_reward(traj(b))


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=8),
    lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=5), kids, max_size=3),
    max_leaves=8,
)
tool_names = ["get_stock", "add_stock", "find_order", "cancel_order", "book", "transfer"]
names = st.sampled_from(tool_names) | st.text(max_size=12)
arg_keys = st.sampled_from(["item", "qty", "customer", "order", "x"]) | st.text(max_size=6)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=names, args=st.dictionaries(arg_keys, json_values, max_size=4) | json_values)
def test_execute_never_raises_on_junk(shop_env, name, args):
    obs = shop_env.execute(ToolCall(name, args))  # type: ignore[arg-type]
    if obs.error is not None:
        assert set(obs.content) == {"error"}
    json.loads(obs.to_text())  # every observation renders to JSON text
