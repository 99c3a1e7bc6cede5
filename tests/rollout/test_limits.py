"""Each episode limit ends the episode with its own TerminationReason, checked before generating."""

from __future__ import annotations

from envace.config import RolloutConfig, SamplingConfig
from envace.roles.act import act_prompt_ids
from envace.rollout import run_rollout
from envace.types import ErrorCode, Mode, Role, TerminationReason

A = Role.ACT


def _cfg(**kw) -> RolloutConfig:
    base = dict(act=SamplingConfig(max_new_tokens=60), rehearse=SamplingConfig(max_new_tokens=60),
                max_context_tokens=4096, max_assistant_turns=20, max_calls_per_turn=20)
    base.update(kw)
    return RolloutConfig(**base)


def _run(tokenizer, kit, tasks, act, cfg, mode=Mode.ENV, rehearse=None):
    engine = kit.ScriptedEngine(tokenizer, act=act, rehearse=rehearse)
    factory = kit.CountingFactory(kit.ShopEnv)
    (traj,) = run_rollout(tasks, k=1, policy=engine, cfg=cfg, mode=mode, env_factory=factory)
    return traj, engine


def test_max_assistant_turns(tokenizer, tasks, kit):
    traj, _ = _run(tokenizer, kit, tasks[1:], [kit.call_text("get_stock", item="pear")], _cfg(max_assistant_turns=3))
    assert traj.termination is TerminationReason.MAX_TURNS
    assert [t.role for t in traj.turns] == [A] * 3 and traj.env_calls == 3


def test_max_calls_per_user_turn(tokenizer, tasks, kit):
    traj, _ = _run(tokenizer, kit, tasks[1:], [kit.call_text("get_stock", item="pear")], _cfg(max_calls_per_turn=2))
    assert traj.termination is TerminationReason.MAX_CALLS
    assert len(traj.turns) == 3 and traj.env_calls == 2  # the third output is recorded, not executed
    assert traj.messages[-1].role == "assistant" and len(traj.turns[-1].tool_calls) == 1


def test_max_calls_counts_every_call_of_one_output(tokenizer, tasks, kit):
    three = "\n".join([kit.call_text("get_stock", item="pear")] * 3)
    traj, _ = _run(tokenizer, kit, tasks[1:], [three],
                   _cfg(max_calls_per_turn=2, act=SamplingConfig(max_new_tokens=300)))
    assert traj.termination is TerminationReason.MAX_CALLS and traj.env_calls == 0
    assert len(traj.turns[0].tool_calls) == 3


def test_call_budget_restarts_with_each_user_turn(tokenizer, tasks, kit):
    call = kit.call_text("get_stock", item="apple")
    traj, _ = _run(tokenizer, kit, tasks[:1], [call, call, "ok", call, call, "ok"], _cfg(max_calls_per_turn=2))
    assert traj.termination is TerminationReason.FINAL_REPLY and traj.env_calls == 4


def test_context_limit_is_checked_before_generating(tokenizer, tasks, kit):
    task = tasks[1]
    first_prompt = act_prompt_ids(tokenizer, task.messages[:2], task.tools)
    call = kit.call_text("get_stock", item="pear")
    # exactly fits: the first Act runs; the second prompt is longer, so the episode stops before it
    traj, engine = _run(tokenizer, kit, [task], [call], _cfg(max_context_tokens=len(first_prompt) + 60))
    assert traj.termination is TerminationReason.CONTEXT_LIMIT
    assert len(traj.turns) == 1 and len(engine.batches) == 1
    assert engine.batches[0][0][1].prompt_ids == first_prompt
    # one token short: nothing is generated at all
    traj, engine = _run(tokenizer, kit, [task], [call], _cfg(max_context_tokens=len(first_prompt) + 59))
    assert traj.termination is TerminationReason.CONTEXT_LIMIT and traj.turns == [] and engine.batches == []


def test_context_limit_applies_to_rehearse_prompts(tokenizer, tasks, kit):
    task = tasks[1]
    first_prompt = act_prompt_ids(tokenizer, task.messages[:2], task.tools)
    # Act fits; the longer (full-style) Rehearse chat does not
    cfg = _cfg(max_context_tokens=len(first_prompt) + 60, rehearse_style="full")
    traj, engine = _run(tokenizer, kit, [task], [kit.call_text("get_stock", item="pear")], cfg,
                        mode=Mode.REHEARSE, rehearse=None)
    assert traj.termination is TerminationReason.CONTEXT_LIMIT
    assert [t.role for t in traj.turns] == [A] and engine.roles_per_batch() == [[A]]


def test_a_truncated_act_output_is_a_format_error(tokenizer, tasks, kit):
    traj, _ = _run(tokenizer, kit, tasks[1:], [kit.call_text("get_stock", item="pear"), "ok"],
                   _cfg(act=SamplingConfig(max_new_tokens=8), max_assistant_turns=1))
    (turn,) = traj.turns
    assert len(turn.response_ids) == len(turn.logprobs) == 8
    assert turn.parse_error is ErrorCode.INVALID_TOOL_CALL_FORMAT
