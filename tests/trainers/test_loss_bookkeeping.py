"""Loss bookkeeping: `algo.agg` means what verl's `agg_loss` means (verl's own function, called on the same
micro-batches with the global token / row counts verl's actor passes), unscored rows are out of every
denominator of the embedded update, and the optional empty-output penalty moves only empty rows' rewards."""

from __future__ import annotations

import copy

import pytest
import torch

from envace.algos import aggregate, role_grpo_advantages
from envace.models.loading import load_policy
from envace.trainers.config import TrainConfig
from envace.trainers.train_rows import TrainRow, build_rows
from envace.trainers.update import policy_update
from envace.types import Mode, Role, Task, Trajectory, Turn

MODES = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum")


@pytest.mark.verl
@pytest.mark.parametrize("mode", MODES)
def test_aggregation_equals_verls_agg_loss_over_micro_batches(mode):
    """The embedded update: each micro-batch's aggregate x its share of the mini-batch's tokens (token-mean)
    or rows (seq-mean); verl: agg_loss per micro-batch with the mini-batch's batch_num_tokens /
    global_batch_size (what its actor passes). Rows without loss tokens are out of both."""
    from verl.trainer.ppo.core_algos import agg_loss

    g = torch.Generator().manual_seed(0)
    values = torch.randn(7, 9, generator=g)
    mask = (torch.rand(7, 9, generator=g) > 0.4).float()
    mask[2] = 0  # a row without loss tokens
    mbs = [slice(0, 3), slice(3, 7)]
    n_tok, n_rows = mask.sum(), (mask.sum(-1) > 0).sum()
    ours = sum(aggregate(values[s], mask[s], mode) * (mask[s].sum() / n_tok if mode == "token-mean"
                                                      else (mask[s].sum(-1) > 0).sum() / n_rows) for s in mbs)
    theirs = sum(agg_loss(values[s], mask[s], mode, batch_num_tokens=n_tok, global_batch_size=n_rows) for s in mbs)
    torch.testing.assert_close(ours, theirs)
    whole = agg_loss(values, mask, mode)  # one micro-batch: the same number again
    torch.testing.assert_close(aggregate(values, mask, mode), whole)


def _with_advantages(rows):
    rows = copy.deepcopy(rows)
    adv = role_grpo_advantages(torch.tensor([r.reward for r in rows]), [r.prompt_index for r in rows],
                               [r.trajectory_key for r in rows], [r.role for r in rows])
    for r, a in zip(rows, adv.tolist()):
        r.advantage = a
    return rows


@pytest.mark.parametrize("agg", MODES)
def test_unscored_rows_are_out_of_every_denominator(tiny_model_dir, role_rows, agg):
    """The update with extra unscored rows (NaN reward, advantage 0, as judge errors get) equals the update
    without them, with KL and entropy terms on; before, their tokens diluted the token mean."""
    scored = _with_advantages(role_rows)
    unscored = copy.deepcopy(scored[:3])
    for r in unscored:
        r.reward, r.advantage = float("nan"), 0.0
    algo = TrainConfig(model="x", algo={"agg": agg, "use_kl": True, "kl_coef": 0.5, "entropy_coef": 0.1}).algo
    params = []
    for rows in (scored, scored + unscored):
        model, tok = load_policy(tiny_model_dir)
        ref, _ = load_policy(tiny_model_dir)
        opt = torch.optim.SGD(model.parameters(), lr=1.0)
        res = policy_update(model, opt, rows, algo, pad_id=tok.pad_token_id, micro_batch=4, grad_clip=1e9,
                            ref_model=ref)
        params.append((torch.cat([p.detach().flatten() for p in model.parameters()]), res.loss,
                       res.metrics["loss_tokens"]))
    torch.testing.assert_close(params[0][0], params[1][0], atol=1e-6, rtol=1e-5)
    assert params[0][1] == pytest.approx(params[1][1]) and params[0][2] == params[1][2]


def test_empty_output_penalty_moves_only_empty_rows():
    task = Task(uuid="t", tools=[], messages=[])
    traj = Trajectory(task=task, prompt_index=0, sample_index=0, mode=Mode.REHEARSE)
    for text in ("<tool_call>x</tool_call>", "  <|im_end|>", ""):
        traj.add_turn(Turn(role=Role.ACT, prompt_ids=[1], response_ids=[2], logprobs=[0.0], text=text,
                            temperature=1.0))
    traj.reward = 0.5
    assert [r.reward for r in build_rows([traj])] == [0.5, 0.5, 0.5]  # off by default
    assert [r.reward for r in build_rows([traj], 0.1)] == [0.5, pytest.approx(0.4), pytest.approx(0.4)]
    traj.reward = None  # unscored stays unscored
    assert all(r.reward != r.reward for r in build_rows([traj], 0.1))
    assert TrainConfig(model="x").algo.empty_output_penalty == 0.0
    assert isinstance(build_rows([traj])[0], TrainRow)
