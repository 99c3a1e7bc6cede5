"""On verl, rows of an unscored episode (judge error) carry an all-zero response mask, which verl's V1 path
stores as the loss mask: verl's own `agg_loss` then counts neither their tokens nor their rows, so the loss
of a batch with them equals the loss of the scored rows alone (as in the embedded update). An empty row
gets the optional empty-output penalty."""

from __future__ import annotations

import pytest
import torch

from envace.trainers.verl.episode import EpisodeResult, episode_outputs
from envace.types import Mode, Role, Task, Trajectory, Turn

pytestmark = pytest.mark.verl


def _result(reward, texts=("<tool_call>a</tool_call>", "b")):
    traj = Trajectory(task=Task(uuid="t", tools=[], messages=[]), prompt_index=0, sample_index=0, mode=Mode.REHEARSE)
    for n, text in enumerate(texts):
        traj.add_turn(Turn(role=Role.ACT if n % 2 == 0 else Role.REHEARSE, prompt_ids=[1, 2],
                           response_ids=[3, 4, 5][: n + 2], logprobs=[-0.1] * (n + 2), text=text, temperature=1.0))
    traj.reward = reward
    return EpisodeResult(traj, [], 0.0, 0.0)


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"])
def test_unscored_rows_are_out_of_verls_loss(verl_api, mode):
    agg_loss = verl_api["core_algos"].agg_loss
    scored = episode_outputs(_result(0.5), trajectory_id="a", response_length=8)
    unscored = episode_outputs(_result(None), trajectory_id="b", response_length=8)
    assert all(o.response_mask == [1] * len(o.response_ids) for o in scored)
    assert all(o.response_mask == [0] * len(o.response_ids) for o in unscored)
    assert all(not o.extra_fields["envace_scored"] for o in unscored)

    def batch(outs):
        mask = torch.zeros(len(outs), 8)
        for i, o in enumerate(outs):
            mask[i, : len(o.response_mask)] = torch.tensor(o.response_mask, dtype=torch.float)
        return torch.arange(len(outs) * 8, dtype=torch.float).reshape(len(outs), 8)[: len(outs)], mask

    v_all, m_all = batch(scored + unscored)
    v_s, m_s = batch(scored)
    torch.testing.assert_close(agg_loss(v_all, m_all, mode), agg_loss(v_s, m_s, mode))


def test_empty_output_penalty_on_verl_rows(verl_api):
    outs = episode_outputs(_result(0.5, texts=("<tool_call>a</tool_call>", " ")), trajectory_id="a",
                           response_length=8, empty_output_penalty=0.1)
    assert [o.reward_score for o in outs] == [0.5, pytest.approx(0.4)]
    assert [o.reward_score for o in episode_outputs(_result(0.5), trajectory_id="a", response_length=8)] == [0.5, 0.5]
