"""The rollout with a real (random, tiny) Qwen3ForCausalLM behind the real HF engine: prompts really
generated from, per-request seeds make the rollout reproducible, and untrusted output is classified."""

from __future__ import annotations

from envace.config import RolloutConfig, SamplingConfig
from envace.roles.act import act_prompt_ids
from envace.rollout import run_rollout
from envace.types import Mode, Role, TerminationReason

CFG = RolloutConfig(act=SamplingConfig(temperature=1.0, max_new_tokens=12),
                    rehearse=SamplingConfig(temperature=1.0, max_new_tokens=12),
                    max_assistant_turns=2, max_context_tokens=2048)


def _signature(trajs):
    return [(t.termination, [(turn.role, turn.response_ids) for turn in t.turns]) for t in trajs]


def test_rollout_with_a_real_random_model(tiny_engine, tokenizer, tasks):
    trajs = run_rollout(tasks, k=2, policy=tiny_engine, cfg=CFG, mode=Mode.REHEARSE, seed=3)
    assert len(trajs) == 4
    for traj in trajs:
        assert isinstance(traj.termination, TerminationReason)
        first = traj.turns[0]
        assert first.role is Role.ACT
        assert first.prompt_ids == act_prompt_ids(tokenizer, traj.task.messages[:2], traj.task.tools)
        for turn in traj.turns:
            assert 1 <= len(turn.response_ids) == len(turn.logprobs) <= 12
            assert all(lp <= 0.0 for lp in turn.logprobs)
    # same seeds -> the same rollout, token for token; another seed -> another rollout
    assert (_signature(run_rollout(tasks, k=2, policy=tiny_engine, cfg=CFG, mode=Mode.REHEARSE, seed=3))
            == _signature(trajs))
    assert (_signature(run_rollout(tasks, k=2, policy=tiny_engine, cfg=CFG, mode=Mode.REHEARSE, seed=4))
            != _signature(trajs))


def test_real_model_as_frozen_simulator(tiny_engine, tokenizer, tasks, kit):
    """A scripted policy makes valid calls, so the random model's Rehearse output is really parsed."""
    policy = kit.ScriptedEngine(tokenizer, act=[kit.call_text("get_stock", item="apple"), "ok"])
    cfg = RolloutConfig(act=SamplingConfig(max_new_tokens=60), rehearse=CFG.rehearse, max_context_tokens=2048)
    trajs = run_rollout(tasks, k=2, policy=policy, simulator=tiny_engine, cfg=cfg, mode=Mode.SIMULATOR)
    for traj in trajs:
        reh = traj.turns_of(Role.REHEARSE)
        assert len(reh) == 1 and not reh[0].trainable
        # random tokens are (almost surely) not a result block: classified, and the episode ends
        assert reh[0].observation.error is not None
        assert traj.termination is TerminationReason.REHEARSE_ERROR
