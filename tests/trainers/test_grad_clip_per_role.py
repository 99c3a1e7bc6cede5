"""Per-role gradient clipping for the shared policy (`optim.grad_clip_per_role`): the update equals, on
SGD with lr 1, minus the sum of each role's own gradient clipped to `grad_clip` — each role's gradient
taken independently as the unclipped update with the other role's advantages set to 0."""

from __future__ import annotations

import copy

import torch

from envace.algos import role_grpo_advantages
from envace.models.loading import load_policy
from envace.trainers.config import TrainConfig
from envace.trainers.update import policy_update
from envace.types import Role


def _rows(role_rows, zero=None):
    rows = copy.deepcopy(role_rows)
    adv = role_grpo_advantages(torch.tensor([r.reward for r in rows]), [r.prompt_index for r in rows],
                               [r.trajectory_key for r in rows], [r.role for r in rows])
    for r, a in zip(rows, adv.tolist()):
        r.advantage = 0.0 if r.role is zero else a
    return rows


def _step(model_dir, rows, clip, per_role):
    model, tok = load_policy(model_dir)
    start = torch.cat([p.detach().flatten() for p in model.parameters()])
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    res = policy_update(model, opt, rows, TrainConfig(model="x").algo, pad_id=tok.pad_token_id, micro_batch=4,
                        grad_clip=clip, clip_per_role=per_role)
    return start - torch.cat([p.detach().flatten() for p in model.parameters()]), res


def test_each_role_is_clipped_on_its_own(tiny_model_dir, role_rows):
    g_act, _ = _step(tiny_model_dir, _rows(role_rows, zero=Role.REHEARSE), 1e9, False)
    g_reh, _ = _step(tiny_model_dir, _rows(role_rows, zero=Role.ACT), 1e9, False)
    clip = 0.5 * min(float(g_act.norm()), float(g_reh.norm()))  # both roles get clipped
    expected = sum(g * min(1.0, clip / float(g.norm())) for g in (g_act, g_reh))
    got, res = _step(tiny_model_dir, _rows(role_rows), clip, True)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-4)
    global_clip, _ = _step(tiny_model_dir, _rows(role_rows), clip, False)  # one clip over both: another update
    assert not torch.allclose(global_clip, expected, atol=1e-5, rtol=1e-4)
    assert res.role_metrics["act"]["grad_norm"] > clip and res.role_metrics["rehearse"]["grad_norm"] > clip
