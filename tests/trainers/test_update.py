"""The policy update on real rows of both roles: log-prob parity with the sampling engine, every
parameter trained, finite loss, and per-role isolation in the per-role-policy mode."""

from __future__ import annotations

import copy
import math

import torch

from envace.algos import role_grpo_advantages
from envace.engines.logprobs import response_logprobs
from envace.models.loading import load_policy
from envace.trainers.config import TrainConfig
from envace.trainers.embedded import _Policy, update_models
from envace.trainers.update import policy_update
from envace.types import Role


def _with_advantages(rows, zero_role=None):
    rows = copy.deepcopy(rows)
    adv = role_grpo_advantages(torch.tensor([r.reward for r in rows]), [r.prompt_index for r in rows],
                               [r.trajectory_key for r in rows], [r.role for r in rows])
    for r, a in zip(rows, adv.tolist()):
        r.advantage = 0.0 if r.role == zero_role else a
    return rows


def test_rows_cover_both_roles_at_two_temperatures(role_rows):
    assert {r.role for r in role_rows} == {Role.ACT, Role.REHEARSE}
    assert {r.temperature for r in role_rows if r.role is Role.ACT} == {1.0}
    assert {r.temperature for r in role_rows if r.role is Role.REHEARSE} == {0.7}
    assert all(len(r.response_ids) == len(r.old_logprobs) > 0 for r in role_rows)


def test_sampled_logprobs_equal_trainer_recomputation(tiny_model_dir, role_rows):
    model, tok = load_policy(tiny_model_dir)
    with torch.no_grad():
        logp, mask, _ = response_logprobs(model, [r.prompt_ids for r in role_rows], [r.response_ids for r in role_rows],
                                          [r.temperature for r in role_rows], tok.pad_token_id)
    for i, r in enumerate(role_rows):
        n = len(r.response_ids)
        assert mask[i, :n].sum() == n
        torch.testing.assert_close(logp[i, :n], torch.tensor(r.old_logprobs), atol=1e-4, rtol=0)


def test_update_trains_every_parameter_with_finite_loss(tiny_model_dir, role_rows):
    model, tok = load_policy(tiny_model_dir)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    rows = _with_advantages(role_rows)
    assert any(r.advantage != 0 for r in rows if r.role is Role.ACT)
    assert any(r.advantage != 0 for r in rows if r.role is Role.REHEARSE)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.0)  # no decay: changes come from gradients
    res = policy_update(model, opt, rows, TrainConfig(model="x").algo, pad_id=tok.pad_token_id, micro_batch=3,
                        grad_clip=1.0)
    assert math.isfinite(res.loss) and math.isfinite(res.grad_norm) and res.grad_norm > 0
    unchanged = [n for n, p in model.named_parameters() if torch.equal(p, before[n])]
    assert unchanged == []
    assert set(res.role_metrics) == {"act", "rehearse"}


def test_micro_batch_size_does_not_change_the_gradient(tiny_model_dir, role_rows):
    """Token-mean is global over the step: accumulating over micro-batches of 1 or all rows at once
    gives the same update."""
    rows = _with_advantages(role_rows)
    results = []
    for mb in (1, len(rows)):
        model, tok = load_policy(tiny_model_dir)
        opt = torch.optim.SGD(model.parameters(), lr=1.0)
        policy_update(model, opt, rows, TrainConfig(model="x").algo, pad_id=tok.pad_token_id, micro_batch=mb,
                      grad_clip=1e9)
        results.append(torch.cat([p.detach().flatten() for p in model.parameters()]))
    torch.testing.assert_close(results[0], results[1], atol=1e-5, rtol=1e-4)


def _per_role_policy(tiny_model_dir):
    cfg = TrainConfig(model=str(tiny_model_dir), policy="per_role", optim={"weight_decay": 0.0, "lr": 1e-3},
                      tracking={"enabled": False})
    return cfg, _Policy(cfg, {"act": tiny_model_dir, "rehearse": tiny_model_dir}, torch.device("cpu"))


def _snapshot(model):
    return [p.detach().clone() for p in model.parameters()]


def _changed(model, snap):
    return any(not torch.equal(p, s) for p, s in zip(model.parameters(), snap))


def test_per_role_models_only_learn_from_their_own_rows(tiny_model_dir, role_rows):
    # Rehearse rows carry signal, Act rows none: only the rehearse model may move.
    cfg, pol = _per_role_policy(tiny_model_dir)
    snaps = {n: _snapshot(m) for n, m in pol.models.items()}
    update_models(pol, _with_advantages(role_rows, zero_role=Role.ACT), cfg)
    assert not _changed(pol.models["act"], snaps["act"])
    assert _changed(pol.models["rehearse"], snaps["rehearse"])
    # and the other way round
    cfg, pol = _per_role_policy(tiny_model_dir)
    snaps = {n: _snapshot(m) for n, m in pol.models.items()}
    update_models(pol, _with_advantages(role_rows, zero_role=Role.REHEARSE), cfg)
    assert _changed(pol.models["act"], snaps["act"])
    assert not _changed(pol.models["rehearse"], snaps["rehearse"])


def test_shared_policy_learns_from_both_roles(tiny_model_dir, role_rows):
    cfg = TrainConfig(model=str(tiny_model_dir), optim={"weight_decay": 0.0, "lr": 1e-3}, tracking={"enabled": False})
    for zero in (Role.ACT, Role.REHEARSE):  # either role alone moves the one shared model
        pol = _Policy(cfg, {"policy": tiny_model_dir}, torch.device("cpu"))
        snap = _snapshot(pol.models["policy"])
        update_models(pol, _with_advantages(role_rows, zero_role=zero), cfg)
        assert _changed(pol.models["policy"], snap)
