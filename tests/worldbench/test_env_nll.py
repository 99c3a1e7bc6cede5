"""Environment-token NLL on real tool-world test transitions, the tiny model as the checkpoint: each transition's
NLL is what a plain full forward gives for the Rehearse prompt followed by the target written out here by hand
(`<execution_result>`, the key-sorted JSON, `</execution_result>`, the end-of-turn token); the summaries are the
per-transition mean and the token-pooled mean; prompts past the context are counted, not scored."""

from __future__ import annotations

import json

import pytest
import torch

from envace.roles.rehearse import rehearse_prompt_ids
from envace.worldbench.config import ScoreConfig
from envace.worldbench.env_nll import aggregate_nll, env_nll_scores
from envace.worldbench.predict import TrainIndex, prompt_messages
from envace.worldbench.records import Split


@pytest.fixture(scope="module")
def split(world_transitions):
    return ([t for t in world_transitions if t.split is Split.TEST],
            TrainIndex([t for t in world_transitions if t.split is Split.TRAIN]))


def test_nll_is_a_plain_forward_over_the_trained_target(frozen, split):
    test, index = split
    cfg = ScoreConfig()
    scores, too_long = env_nll_scores(frozen, test, cfg, index)
    assert too_long == 0 and [s.id for s in scores] == [t.id for t in test]
    tok = frozen.tokenizer
    for t, s in list(zip(test, scores))[::5]:
        target_text = "<execution_result>\n" + json.dumps(t.value, sort_keys=True) + "\n</execution_result><|im_end|>"
        prompt = rehearse_prompt_ids(tok, prompt_messages(t, cfg, index), enable_thinking=True)
        target = tok.encode(target_text, add_special_tokens=False)
        assert s.n_tokens == len(target)
        with torch.no_grad():
            logp = torch.log_softmax(frozen.model(input_ids=torch.tensor([prompt + target])).logits[0].float(), -1)
        nll = -sum(float(logp[len(prompt) - 1 + j, x]) for j, x in enumerate(target))
        assert s.nll_sum == pytest.approx(nll, rel=1e-4) and s.nll == pytest.approx(nll / len(target), rel=1e-4)
    agg = aggregate_nll(scores, n_boot=200)
    assert agg["all"]["nll"]["mean"] == pytest.approx(sum(s.nll for s in scores) / len(scores))
    assert agg["all"]["nll_pooled"] == pytest.approx(sum(s.nll_sum for s in scores) / sum(s.n_tokens for s in scores))
    assert agg["source"].keys() == {"world"} and agg["all"]["tokens"] == sum(s.n_tokens for s in scores)


def test_prompts_past_the_context_are_counted(frozen, split):
    test, index = split
    saved = frozen.context
    frozen.context = 30  # shorter than any target plus the system prompt
    try:
        scores, too_long = env_nll_scores(frozen, test[:4], ScoreConfig(), index)
    finally:
        frozen.context = saved
    assert scores == [] and too_long == 4
