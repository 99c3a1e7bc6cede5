"""Which rows reach which gradient, checked on the weights (SGD, lr 1: a weight's change is its gradient) against
the row-by-row hand computation of conftest's `hand_role_grads`:
- policy=per_role: each model is updated from its own role's rows only; the Act model never receives a
  Rehearse row's gradient (unchanged to the bit when only Rehearse rows carry advantage), and vice versa;
- `algo.rehearse_loss_weight` w (shared policy): each Rehearse token (row) counts w times in the loss and in
  its denominator; w = 0 leaves the Rehearse rows out entirely (their tokens out of the token mean too)."""

from __future__ import annotations

import copy

import pytest
import torch

from envace.algos import role_grpo_advantages
from envace.trainers.config import TrainConfig
from envace.trainers.embedded import _Policy, update_models
from envace.types import Role


def _rows(role_rows, only: Role | None = None):
    """Copies of the sampled rows with role-wise GRPO advantages (the rows are views: never edit the fixture's);
    `only`: every other role's rows get advantage 0."""
    rows = copy.deepcopy(role_rows)
    adv = role_grpo_advantages(torch.tensor([r.reward for r in rows]), [r.prompt_index for r in rows],
                               [r.trajectory_key for r in rows], [r.role for r in rows])
    for r, a in zip(rows, adv.tolist()):
        r.advantage = a if only is None or r.role is only else 0.0
    assert any(r.advantage != 0 for r in rows)
    return rows


def _flat(model) -> torch.Tensor:
    return torch.cat([p.detach().flatten().clone() for p in model.parameters()])


def _sgd_policy(cfg: TrainConfig, model_dir) -> _Policy:
    """The trainer's own model holder, its optimizers swapped for plain SGD at lr 1."""
    names = ["policy"] if cfg.policy == "shared" else ["act", "rehearse"]
    policy = _Policy(cfg, {n: model_dir for n in names}, torch.device("cpu"))
    policy.optimizers = {n: torch.optim.SGD(m.parameters(), lr=1.0) for n, m in policy.models.items()}
    return policy


def _hand(hand_role_grads, model_dir, rows, **kw):
    from envace.models.loading import load_policy

    model, _ = load_policy(model_dir, device="cpu")
    return hand_role_grads(model, rows, **kw)


@pytest.mark.parametrize("only", [Role.REHEARSE, Role.ACT, None], ids=["rehearse-only", "act-only", "both"])
def test_per_role_models_learn_only_from_their_own_rows(tiny_model_dir, role_rows, hand_role_grads, only):
    rows = _rows(role_rows, only)
    cfg = TrainConfig(model=str(tiny_model_dir), policy="per_role", optim={"grad_clip": 1e9})
    policy = _sgd_policy(cfg, tiny_model_dir)
    before = {n: _flat(m) for n, m in policy.models.items()}
    update_models(policy, rows, cfg)
    for role in (Role.ACT, Role.REHEARSE):
        name = role.value
        delta = before[name] - _flat(policy.models[name])
        if only not in (None, role):  # no advantage on this model's own rows: not a bit may move
            assert torch.equal(delta, torch.zeros_like(delta)), f"the {name} model moved on the other role's rows"
            continue
        # a model's update is the token mean over its own role's rows only
        want = _hand(hand_role_grads, tiny_model_dir, [r for r in rows if r.role is role])[role].float()
        assert float(want.norm()) > 0
        torch.testing.assert_close(delta, want, atol=2e-6, rtol=1e-3)


@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-mean"])
@pytest.mark.parametrize("weight", [1.0, 0.5, 0.0])
def test_rehearse_loss_weight_scales_the_rows_and_their_share_of_the_denominator(tiny_model_dir, role_rows,
                                                                                hand_role_grads, weight, agg):
    rows = _rows(role_rows)
    cfg = TrainConfig(model=str(tiny_model_dir), algo={"rehearse_loss_weight": weight, "agg": agg},
                      optim={"grad_clip": 1e9})
    policy = _sgd_policy(cfg, tiny_model_dir)
    before = _flat(policy.models["policy"])
    updates = update_models(policy, rows, cfg)
    delta = before - _flat(policy.models["policy"])
    g = _hand(hand_role_grads, tiny_model_dir, rows, weights={Role.REHEARSE: weight}, agg=agg)
    want = (g[Role.ACT] + g[Role.REHEARSE]).float()
    torch.testing.assert_close(delta, want, atol=2e-6, rtol=1e-3)
    if weight == 0:  # out of the update altogether: nothing of it counted or logged
        act_tokens = sum(len(r.response_ids) for r in rows if r.role is Role.ACT)
        assert updates["policy"].metrics["loss_tokens"] == act_tokens
        assert set(updates["policy"].role_metrics) == {"act"}
        # and the update is the one of the Act rows alone
        alone = _hand(hand_role_grads, tiny_model_dir, [r for r in rows if r.role is Role.ACT], agg=agg)
        torch.testing.assert_close(delta, alone[Role.ACT].float(), atol=2e-6, rtol=1e-3)


@pytest.mark.parametrize("bad", [-0.5, float("nan"), float("inf")])
def test_rehearse_loss_weight_is_validated(bad):
    with pytest.raises(ValueError, match="rehearse_loss_weight"):
        TrainConfig.model_validate({"model": "m", "algo": {"rehearse_loss_weight": bad}})
