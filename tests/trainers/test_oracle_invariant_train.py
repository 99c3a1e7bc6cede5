"""The oracle-rehearsal invariant end to end in the embedded trainer: a rehearse-mode run whose Rehearse
seat is the oracle engine (envace.rollout.oracle: the real world's answers) and an env-mode run, same
seeds, same start model (briefly SFT'd so it makes calls), a reward it earns sometimes (the toy reward).

- per-role policy (the Act model learns from Act rows only): every step has the same Act row and token
  counts, rewards, Act advantages and endings;
- shared policy (EnvACE's own arm) with the Rehearse rows at loss weight 0 (`algo.rehearse_loss_weight`):
  the trained weights equal, tensor for tensor, those of standard GRPO in the real environment (grpo_env:
  rollout.mode=env, algo.advantage=grpo). Role-wise GRPO's Act baseline is then plain GRPO's (env mode has
  no other rows), so a baseline that mixed the roles breaks it. Restoring the Rehearse rows (weight 1, EnvACE)
  changes the weights: the training signal of the rehearsed world is exactly what tells the arms apart.
The rollout-level version, with the rules that must break it, is tests/rollout/test_oracle_invariant.py."""

from __future__ import annotations

import torch
from safetensors.torch import load_file

from envace.rollout.oracle import OracleRehearser
from envace.trainers.config import TrainConfig
from envace.trainers.embedded import train
from envace.worlds.environment import WorldEnvironment

# The tiny model earns no checklist reward; the toy reward (its first call names get_balance) it earns sometimes,
# so groups disagree and the Act advantages compared are not all 0.
TOY = {"kind": "first_call_tool", "target": "get_balance"}
SAME = ("act/rows", "act/adv_mean", "act/adv_std", "act/reward", "act/response_tokens", "act/tool_call_validity")


def oracle(tok, pool):
    return OracleRehearser(tok, pool, WorldEnvironment)


def _cfg(model, out, mode, policy="per_role", steps=3, **algo):
    return TrainConfig.model_validate(dict(
        model=str(model), out_dir=str(out), policy=policy, steps=steps, prompts_per_step=8, k=4, save_every=steps,
        threads=1, progress=False, shadow_monitor=False, tracking={"enabled": False}, data={"n_tasks": 30, "seed": 2},
        reward="toy", toy_reward=TOY, algo=algo,
        rollout={"mode": mode, "rehearse_style": "full", "max_assistant_turns": 3, "max_context_tokens": 4096,
                 "act": {"max_new_tokens": 48}, "rehearse": {"max_new_tokens": 256}}))  # room for every answer


def _weights(result):
    return load_file(result.checkpoint / "policy" / "model.safetensors")


def test_oracle_rehearse_run_equals_env_run(act_sft_dir, tmp_path):
    reh = train(_cfg(act_sft_dir, tmp_path / "reh", "rehearse"), rehearse_engine=oracle)
    env = train(_cfg(act_sft_dir, tmp_path / "env", "env"))
    ends = [{k: v for k, v in h.items() if k.startswith(("termination/", "act/tool_call"))} for h in reh.history]
    assert sum(h["rehearse/rows"] for h in reh.history) >= 5, ends  # the oracle answered calls (10 on this seed)
    assert all(h["env_calls"] == 0 for h in reh.history)
    assert any(h["act/adv_std"] > 0 for h in reh.history)  # the rewards differ within groups: advantages compare
    for a, b in zip(reh.history, env.history):
        assert {k: a.get(k) for k in SAME} == {k: b.get(k) for k in SAME}
        assert {k: v for k, v in a.items() if k.startswith("termination/")} == \
            {k: v for k, v in b.items() if k.startswith("termination/")}


def test_shared_policy_without_rehearse_rows_trains_as_grpo_env(act_sft_dir, tmp_path):
    reh = train(_cfg(act_sft_dir, tmp_path / "reh0", "rehearse", "shared", 2, rehearse_loss_weight=0.0),
                rehearse_engine=oracle)
    env = train(_cfg(act_sft_dir, tmp_path / "env", "env", "shared", 2, advantage="grpo"))
    # not vacuous: the oracle answered calls (rows left out of the update) and the Act advantages carry signal
    assert sum(h["rehearse/rows"] for h in reh.history) >= 5
    assert any(h["act/adv_std"] > 0 for h in reh.history) and all(h["env_calls"] == 0 for h in reh.history)
    for a, b in zip(reh.history, env.history):
        assert {k: a.get(k) for k in SAME} == {k: b.get(k) for k in SAME}
        assert a["update/loss_tokens"] == b["update/loss_tokens"]  # Rehearse tokens out of the denominator
    got, want = _weights(reh), _weights(env)
    assert got.keys() == want.keys()
    changed = [k for k in want if not torch.equal(want[k], load_file(act_sft_dir / "model.safetensors")[k])]
    assert changed  # training moved the weights
    for k in want:
        assert torch.equal(got[k], want[k]), k

    envace = train(_cfg(act_sft_dir, tmp_path / "reh1", "rehearse", "shared", 2), rehearse_engine=oracle)
    assert envace.history[0]["update/loss_tokens"] > env.history[0]["update/loss_tokens"]
    differ = [k for k in want if not torch.equal(_weights(envace)[k], want[k])]
    assert differ, "the Rehearse rows at weight 1 left every weight as grpo_env's"
