"""The oracle-rehearsal invariant end to end in the embedded trainer: a rehearse-mode run whose Rehearse
seat is the oracle engine (envace.rollout.oracle: the real world's answers) and an env-mode run, same
seeds, same start model (briefly SFT'd so it makes calls), per-role policy (the Act model learns from Act
rows only): every step has the same Act row and token counts, rewards, Act advantages and endings.
The rollout-level version, with the rules that must break it, is tests/rollout/test_oracle_invariant.py."""

from __future__ import annotations

import pytest

from envace.rollout.oracle import OracleRehearser
from envace.trainers.config import TrainConfig
from envace.trainers.embedded import train
from envace.worlds.environment import WorldEnvironment

pytestmark = pytest.mark.slow

SAME = ("act/rows", "act/adv_mean", "act/adv_std", "act/reward", "act/response_tokens", "act/tool_call_validity")


def _cfg(model, out, mode):
    return TrainConfig.model_validate(dict(
        model=str(model), out_dir=str(out), policy="per_role", steps=3, prompts_per_step=8, k=4, save_every=3,
        threads=1, progress=False, shadow_monitor=False, tracking={"enabled": False}, data={"n_tasks": 30, "seed": 2},
        rollout={"mode": mode, "rehearse_style": "full", "max_assistant_turns": 3, "max_context_tokens": 4096,
                 "act": {"max_new_tokens": 48}, "rehearse": {"max_new_tokens": 64}}))


def test_oracle_rehearse_run_equals_env_run(act_sft_dir, tmp_path):
    oracle = lambda tok, pool: OracleRehearser(tok, pool, WorldEnvironment)  # noqa: E731
    reh = train(_cfg(act_sft_dir, tmp_path / "reh", "rehearse"), rehearse_engine=oracle)
    env = train(_cfg(act_sft_dir, tmp_path / "env", "env"))
    ends = [{k: v for k, v in h.items() if k.startswith(("termination/", "act/tool_call"))} for h in reh.history]
    assert sum(h["rehearse/rows"] for h in reh.history) >= 5, ends  # the oracle answered calls (10 on this seed)
    assert all(h["env_calls"] == 0 for h in reh.history)
    for a, b in zip(reh.history, env.history):
        assert {k: a.get(k) for k in SAME} == {k: b.get(k) for k in SAME}
        assert {k: v for k, v in a.items() if k.startswith("termination/")} == \
            {k: v for k, v in b.items() if k.startswith("termination/")}
