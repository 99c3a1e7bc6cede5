"""Whatever the models write, the rollout finishes: every episode ends with a TerminationReason and
every generation is recorded (hypothesis over arbitrary Act and Rehearse texts, in every mode)."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from envace.config import RolloutConfig, SamplingConfig
from envace.rollout import run_rollout
from envace.types import Mode, Role, TerminationReason


def _call(name, args) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": args}) + "\n</tool_call>"


PIECES = [
    _call("get_stock", {"item": "apple"}), _call("get_stock", {"item": "kiwi"}), _call("explode", {}),
    _call("add_stock", {"item": "pear", "qty": 2}), _call("add_stock", {"item": "pear", "qty": "2"}),
    _call("sell", {}), "<tool_call>{", "</tool_call>", "<think>", "</think>", "Done.", "\n", "<|im_end|>",
    '<execution_result>\n{"stock": 1}\n</execution_result>', "<execution_result>", "</execution_result>",
    '{"error_tool_call": {"code": "X"}}', "[]", "{}", "null",
]
TEXT = st.one_of(st.text(max_size=40),
                 st.lists(st.one_of(st.sampled_from(PIECES), st.text(max_size=4)), max_size=4).map("".join))
CFG = RolloutConfig(act=SamplingConfig(max_new_tokens=40), rehearse=SamplingConfig(max_new_tokens=30),
                    max_assistant_turns=4, max_calls_per_turn=3, max_context_tokens=4096)


@settings(max_examples=150, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(act=st.lists(TEXT, min_size=1, max_size=5), rehearse=st.lists(TEXT, min_size=1, max_size=3),
       mode=st.sampled_from([Mode.REHEARSE, Mode.ENV]))
def test_rollout_never_raises_on_model_output(tokenizer, tasks, kit, act, rehearse, mode):
    counter = iter(range(10_000))
    engine = kit.ScriptedEngine(tokenizer, act=act,
                                rehearse=lambda prompt, call: rehearse[next(counter) % len(rehearse)])
    trajs = run_rollout(tasks, k=2, policy=engine, cfg=CFG, mode=mode, env_factory=kit.ShopEnv)
    generated = sum(len(batch) for batch in engine.batches)
    assert generated == sum(len(t.turns) for t in trajs)
    for traj in trajs:
        assert isinstance(traj.termination, TerminationReason)
        assert 1 <= len(traj.turns_of(Role.ACT)) <= CFG.max_assistant_turns
        if mode is Mode.REHEARSE:
            assert traj.env_calls == 0
