"""`compute_score` through verl's own reward path: `load_reward_manager` imports it from the file the
launcher names, and verl's NaiveRewardManager calls it with the loop's extra fields merged in."""

from __future__ import annotations

import asyncio
import json

import numpy as np
import pytest
import torch

from envace.trainers.verl.reward import compute_score

pytestmark = pytest.mark.verl


def naive_input(verl_api, extra_fields: dict):
    n_prompt, n_resp = 4, 3
    batch = {"prompts": torch.ones(1, n_prompt, dtype=torch.long), "responses": torch.ones(1, n_resp, dtype=torch.long),
             "attention_mask": torch.ones(1, n_prompt + n_resp, dtype=torch.long)}
    obj = lambda v: np.array([v], dtype=object)  # noqa: E731
    non_tensor = {"data_source": obj("envace_toolworld"), "reward_model": obj({"ground_truth": "[]"}),
                  "extra_info": obj({"index": 0}), "tool_extra_fields": obj(extra_fields),
                  "__num_turns__": np.array([5])}
    return verl_api["DataProto"].from_dict(tensors=batch, non_tensors=non_tensor)


def test_reward_manager_reads_the_loops_verdict(verl_api, verl_config_factory, tokenizer):
    from verl.trainer.ppo.reward import load_reward_manager

    config = verl_config_factory()
    items = [{"passed": True}, {"passed": False}, {"passed": True}, {"passed": True}]
    extra = {"role": "act", "envace_reward": 0.75, "envace_scored": True,
             "envace_breakdown": json.dumps({"source": "checklist_rule", "items": items})}

    async def go():  # built inside the running loop, as verl's reward worker does
        return await load_reward_manager(config, tokenizer).run_single(naive_input(verl_api, extra))

    out = asyncio.run(go())
    assert out["reward_score"] == 0.75
    assert out["reward_extra_info"]["checklist_item_pass_rate"] == 0.75
    assert out["reward_extra_info"]["envace_scored"] == 1.0


def test_unscored_and_missing():
    assert compute_score("s", "", None, {"envace_reward": None, "envace_scored": False}) == \
        {"score": 0.0, "envace_scored": 0.0}
    assert compute_score("s", "", None, {"envace_reward": 1.0, "envace_breakdown": '{"state_ok": true}'}) == \
        {"score": 1.0, "envace_scored": 1.0, "state_ok": 1.0}
    with pytest.raises(ValueError, match="default_agent_loop=envace_agent"):
        compute_score("gsm8k", "42", "42", {"index": 3})
