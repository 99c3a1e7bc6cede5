"""The state machine in rehearse and simulator modes (observations written by a model), against the
ScriptedEngine test double; the real-model path is in test_hf_engine.py."""

from __future__ import annotations

import json

import pytest

from envace.config import RolloutConfig, SamplingConfig
from envace.roles.prompts import SEC_HISTORY, SEC_LATEST
from envace.rollout import derive_seed, run_rollout
from envace.types import ErrorCode, Message, Mode, Role, TerminationReason

A, R = Role.ACT, Role.REHEARSE


def _cfg(**kw) -> RolloutConfig:
    base = dict(act=SamplingConfig(temperature=0.7, top_p=0.9, max_new_tokens=60),
                rehearse=SamplingConfig(temperature=0.3, top_p=1.0, max_new_tokens=90),
                max_context_tokens=4096)
    base.update(kw)
    return RolloutConfig(**base)


@pytest.fixture
def happy_act(kit):
    return [kit.call_text("get_stock", item="apple"), "There are 42.",
            kit.call_text("add_stock", item="apple", qty=3), "Done."]


def test_rehearse_mode_makes_zero_env_calls(tokenizer, tasks, kit, happy_act):
    factory = kit.CountingFactory(kit.ForbiddenEnv)
    engine = kit.ScriptedEngine(tokenizer, act=happy_act, rehearse=kit.stock_result)
    trajs = run_rollout(tasks, k=3, policy=engine, cfg=_cfg(), mode=Mode.REHEARSE, env_factory=factory)
    assert factory.made == []  # the factory is never even called
    assert [t.env_calls for t in trajs] == [0] * 6
    assert [(t.prompt_index, t.sample_index) for t in trajs] == [(p, s) for p in range(2) for s in range(3)]
    assert all(t.termination is TerminationReason.FINAL_REPLY for t in trajs)

    two = trajs[0]
    assert [t.role for t in two.turns] == [A, R, A, A, R, A]
    assert [t.user_turn for t in two.turns] == [0, 0, 0, 1, 1, 1]
    rehearsed = json.dumps({"item": "apple", "rehearsed": "get_stock", "stock": 42}, sort_keys=True)
    added = json.dumps({"item": "apple", "rehearsed": "add_stock", "stock": 42}, sort_keys=True)
    assert [(m.role, m.content, m.name) for m in two.messages] == [
        ("system", "You manage a shop.", None),
        ("user", "How many apples?", None),
        ("assistant", "", None),
        ("tool", rehearsed, "get_stock"),
        ("assistant", "There are 42.", None),
        ("user", "Add 3 apples.", None),
        ("assistant", "", None),
        ("tool", added, "add_stock"),
        ("assistant", "Done.", None),
    ]
    assert [c.key() for c in two.messages[6].tool_calls] == ['add_stock({"item": "apple", "qty": 3})']
    reh = two.turns[1]
    assert reh.call.key() == 'get_stock({"item": "apple"})' and reh.observation.ok and reh.trainable
    assert reh.temperature == 0.3 and two.turns[0].temperature == 0.7
    assert [t.role for t in trajs[3].turns] == [A, R, A]


def test_all_episodes_of_a_phase_share_one_batched_call(tokenizer, tasks, kit, happy_act):
    engine = kit.ScriptedEngine(tokenizer, act=happy_act, rehearse=kit.stock_result)
    run_rollout(tasks, k=3, policy=engine, cfg=_cfg(), mode="rehearse")
    assert engine.roles_per_batch() == [[A] * 6, [R] * 6, [A] * 6, [A] * 3, [R] * 3, [A] * 3]
    for batch in engine.batches:
        for role, req in batch:
            expect = (0.7, 0.9, 60, ["<|im_end|>"]) if role is A else (0.3, 1.0, 90, ["</execution_result>"])
            assert (req.temperature, req.top_p, req.max_new_tokens, req.stop) == expect


def test_every_call_of_one_act_output_is_rehearsed_in_the_same_batch(tokenizer, tasks, kit):
    two_calls = kit.call_text("get_stock", item="apple") + "\n" + kit.call_text("get_stock", item="pear")
    engine = kit.ScriptedEngine(tokenizer, act=[two_calls, "ok"], rehearse=kit.stock_result)
    (traj,) = run_rollout(tasks[1:], k=1, policy=engine, cfg=_cfg(rehearse_style="full"), mode=Mode.REHEARSE)
    assert engine.roles_per_batch() == [[A], [R, R], [A]]
    assert [t.call.arguments["item"] for t in traj.turns_of(R)] == ["apple", "pear"]
    tools = [json.loads(m.content)["item"] for m in traj.messages if m.role == "tool"]
    assert tools == ["apple", "pear"]
    # both Rehearse prompts see the same history: the user turn, not the Act output being simulated
    for _, req in engine.batches[1]:
        prompt = tokenizer.decode(req.prompt_ids)
        assert f"{SEC_HISTORY}\nUser: How many pears?\n\n{SEC_LATEST}\n{two_calls}<|im_end|>" not in prompt
        assert f"{SEC_HISTORY}\nUser: How many pears?\n\n{SEC_LATEST}\n{two_calls}\n\n" in prompt


def test_rehearse_prompt_holds_few_shot_unless_disabled(tokenizer, tasks, kit):
    for few_shot, expect in [(True, '"response": {"item": "apple", "stock": 1}'), (False, "<unavailable>")]:
        engine = kit.ScriptedEngine(tokenizer, act=[kit.call_text("get_stock", item="pear"), "ok"],
                                    rehearse=kit.stock_result)
        run_rollout(tasks[1:], k=1, policy=engine, cfg=_cfg(few_shot=few_shot), mode=Mode.REHEARSE,
                    rehearse_style="compact")
        prompt = tokenizer.decode(engine.batches[1][0][1].prompt_ids)
        assert expect in prompt


@pytest.mark.parametrize("rehearse_text, parse_error, obs_error", [
    ("I think it is 5.", ErrorCode.NO_EXECUTION_RESULT_TAG, ErrorCode.NO_EXECUTION_RESULT_TAG),
    ("<execution_result>\n{oops}\n</execution_result>", ErrorCode.RESULT_JSON_DECODE, ErrorCode.RESULT_JSON_DECODE),
])
def test_unparseable_rehearse_output_ends_the_episode(tokenizer, tasks, kit, rehearse_text, parse_error, obs_error):
    engine = kit.ScriptedEngine(tokenizer, act=[kit.call_text("get_stock", item="apple"), "never reached"],
                                rehearse=rehearse_text)
    (traj,) = run_rollout(tasks[:1], k=1, policy=engine, cfg=_cfg(), mode=Mode.REHEARSE)
    assert traj.termination is TerminationReason.REHEARSE_ERROR
    assert [t.role for t in traj.turns] == [A, R]
    reh = traj.turns[1]
    assert reh.parse_error is parse_error and reh.observation.error is obs_error
    assert traj.messages[-1].role == "tool" and "error_tool_call" in traj.messages[-1].content
    # rehearse_parse_failure=observe: Act sees the parser's error object and goes on
    engine = kit.ScriptedEngine(tokenizer, act=[kit.call_text("get_stock", item="apple"), "gave up"],
                                rehearse=rehearse_text)
    (traj,) = run_rollout(tasks[:1], k=1, policy=engine, cfg=_cfg(rehearse_parse_failure="observe"),
                          mode=Mode.REHEARSE)
    assert [t.role for t in traj.turns][:3] == [A, R, A] and traj.messages[4] == Message("assistant", "gave up")


REHEARSED_ERROR = ('<execution_result>\n{"error_tool_call": {"code": "INVALID_PARAMETERS", "message": "m"}}\n'
                   "</execution_result>")


@pytest.mark.parametrize("rule, ends", [("continue", None), ("end", TerminationReason.ERROR_OBSERVATION),
                                        ("end_rehearsed", TerminationReason.REHEARSE_ERROR)])
def test_a_rehearsed_error_follows_the_error_observation_rule(tokenizer, tasks, kit, rule, ends):
    """Default (continue): Act sees the rehearsed error and goes on, as it does after a real one."""
    engine = kit.ScriptedEngine(tokenizer, act=[kit.call_text("get_stock", item="apple"), "sorry"],
                                rehearse=REHEARSED_ERROR)
    (traj,) = run_rollout(tasks[:1], k=1, policy=engine, cfg=_cfg(error_observation=rule), mode=Mode.REHEARSE)
    reh = traj.turns[1]
    assert reh.parse_error is None and reh.observation.error is ErrorCode.REHEARSED_ERROR
    assert traj.messages[3].role == "tool" and "error_tool_call" in traj.messages[3].content
    if ends is None:
        assert [t.role for t in traj.turns][:3] == [A, R, A] and traj.messages[4] == Message("assistant", "sorry")
        assert traj.termination is not TerminationReason.REHEARSE_ERROR
    else:
        assert traj.termination is ends and [t.role for t in traj.turns] == [A, R]


def test_a_malformed_act_call_ends_a_rehearsed_episode(tokenizer, tasks, kit):
    """invalid_call="end" ends it; the default (observe) shows the parser's error to Act instead."""
    bad = kit.call_text("add_stock", item="apple", qty="three")
    engine = kit.ScriptedEngine(tokenizer, act=[bad], rehearse=None)  # Rehearse must never be asked
    ended = run_rollout(tasks[:1], k=1, policy=engine, cfg=_cfg(invalid_call="end"), mode=Mode.REHEARSE)
    assert ended[0].termination is TerminationReason.INVALID_TOOL_CALL
    (traj,) = run_rollout(tasks[:1], k=1, policy=engine, cfg=_cfg(invalid_call="end"), mode=Mode.REHEARSE)
    assert traj.termination is TerminationReason.INVALID_TOOL_CALL
    assert RolloutConfig().invalid_call == "observe"  # the default: the same rule in every mode
    (act,) = traj.turns
    assert act.parse_error is ErrorCode.INVALID_PARAMETERS and act.tool_calls == []
    assert traj.messages[-2] == Message("assistant", bad)
    err = json.loads(traj.messages[-1].content)["error_tool_call"]
    assert err["code"] == "INVALID_PARAMETERS" and "qty" in err["message"]


@pytest.mark.parametrize("mode", [Mode.REHEARSE, Mode.ENV])
def test_a_malformed_act_call_is_an_error_observation_in_every_mode_with_observe(tokenizer, tasks, kit, mode):
    """invalid_call="observe" (the default): the parser's error message, then Act tries again,
    alike in rehearse and env mode; Rehearse and the world never see the malformed call."""
    bad = kit.call_text("add_stock", item="apple", qty="three")
    engine = kit.ScriptedEngine(tokenizer, act=[bad, "done"], rehearse=None)
    factory = kit.CountingFactory(kit.ForbiddenEnv if mode is Mode.REHEARSE else kit.ShopEnv)
    (traj,) = run_rollout(tasks[:1], k=1, policy=engine, cfg=_cfg(invalid_call="observe"), mode=mode,
                          env_factory=factory)
    assert [t.role for t in traj.turns][:2] == [A, A] and traj.env_calls == 0
    assert json.loads(traj.messages[3].content)["error_tool_call"]["code"] == "INVALID_PARAMETERS"
    assert traj.messages[4] == Message("assistant", "done")


def test_simulator_mode_uses_the_frozen_engine(tokenizer, tasks, kit, happy_act):
    policy = kit.ScriptedEngine(tokenizer, act=happy_act, rehearse=None)
    frozen = kit.ScriptedEngine(tokenizer, act=None, rehearse=kit.stock_result)
    factory = kit.CountingFactory(kit.ForbiddenEnv)
    trajs = run_rollout(tasks, k=2, policy=policy, simulator=frozen, cfg=_cfg(), mode=Mode.SIMULATOR,
                        env_factory=factory)
    assert factory.made == []
    assert all(roles == [A] * len(roles) for roles in policy.roles_per_batch())
    assert frozen.roles_per_batch() == [[R] * 4, [R] * 2]
    for traj in trajs:
        assert traj.termination is TerminationReason.FINAL_REPLY
        assert all(t.trainable is (t.role is A) for t in traj.turns)


def test_shadow_env_records_real_observations_without_showing_them(tokenizer, tasks, kit, happy_act):
    shadow = kit.CountingFactory(kit.ShopEnv)
    engine = kit.ScriptedEngine(tokenizer, act=happy_act, rehearse=kit.stock_result)
    trajs = run_rollout(tasks, k=1, policy=engine, cfg=_cfg(), mode=Mode.REHEARSE, shadow_env_factory=shadow)
    assert len(shadow.made) == 2 and [e.resets for e in shadow.made] == [1, 1]
    two, one = trajs
    assert [t.real_observation.content for t in two.turns_of(R)] == [{"item": "apple", "stock": 5},
                                                                     {"item": "apple", "stock": 8}]
    assert [t.real_observation.content for t in one.turns_of(R)] == [{"item": "apple", "stock": 1}]
    assert (two.env_calls, one.env_calls) == (2, 1)
    assert all('"stock": 42' in m.content for m in two.messages if m.role == "tool")  # the policy sees rehearsal


def test_every_request_gets_its_derived_seed(tokenizer, tasks, kit, happy_act):
    engine = kit.ScriptedEngine(tokenizer, act=happy_act, rehearse=kit.stock_result)
    trajs = run_rollout(tasks, k=2, policy=engine, cfg=_cfg(), mode=Mode.REHEARSE, step=7, seed=11)
    got = sorted(req.seed for batch in engine.batches for _, req in batch)
    expected = []
    for t in trajs:
        for role in (A, R):
            expected += [derive_seed(11, 7, t.prompt_index, t.sample_index, role.value, i)
                         for i in range(len(t.turns_of(role)))]
    assert got == sorted(expected) and len(set(got)) == len(got) == 2 * (6 + 3)


def test_mode_argument_checks(tokenizer, tasks, kit):
    engine = kit.ScriptedEngine(tokenizer, act=["x"])
    with pytest.raises(ValueError, match="needs env_factory"):
        run_rollout(tasks, k=1, policy=engine, cfg=_cfg(), mode=Mode.ENV)
    with pytest.raises(ValueError, match="needs simulator"):
        run_rollout(tasks, k=1, policy=engine, cfg=_cfg(), mode=Mode.SIMULATOR)
    with pytest.raises(ValueError, match="k=0"):
        run_rollout(tasks, k=0, policy=engine, cfg=_cfg(), mode=Mode.REHEARSE)
    with pytest.raises(ValueError, match="'bogus'"):
        run_rollout(tasks, k=1, policy=engine, cfg=_cfg(), mode="bogus")
