"""PPO-clip with dual clip, vanilla PG and aggregation, against per-token Python loops and hand-counted cases."""

from __future__ import annotations

import math

import pytest
import torch

from envace.algos import POLICY_LOSSES, aggregate, ppo_clip_loss


def _slow_token_loss(logp, old, a, eps_low, eps_high, c):
    ratio = math.exp(logp - old)
    unclipped = -a * ratio
    clipped = -a * min(max(ratio, 1 - eps_low), 1 + eps_high)
    loss = max(unclipped, clipped)
    if a < 0:
        loss = min(loss, c * abs(a))
    return loss


def _slow_aggregate(values, mask, mode):
    """values, mask: nested lists (B, L)."""
    if mode == "token-mean":
        tot = sum(v for row, mrow in zip(values, mask) for v, m in zip(row, mrow) if m)
        cnt = sum(1 for mrow in mask for m in mrow if m)
        return tot / cnt
    per_row = []
    for row, mrow in zip(values, mask):
        toks = [v for v, m in zip(row, mrow) if m]
        if not toks:
            continue
        per_row.append(sum(toks) / len(toks) if mode == "seq-mean-token-mean" else sum(toks))
    return sum(per_row) / len(per_row)


def _random_inputs(seed, b=6, length=9, per_token_adv=False):
    g = torch.Generator().manual_seed(seed)
    old = -torch.rand(b, length, generator=g, dtype=torch.float64) * 3
    logp = old + torch.randn(b, length, generator=g, dtype=torch.float64) * 0.5  # ratios well outside [0.8, 1.2]
    adv_shape = (b, length) if per_token_adv else (b,)
    adv = torch.randn(adv_shape, generator=g, dtype=torch.float64)
    mask = torch.rand(b, length, generator=g) < 0.7
    mask[0] = False  # one row without loss tokens
    mask[1, 0] = True
    return logp, old, adv, mask


@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"])
@pytest.mark.parametrize("per_token_adv", [False, True])
@pytest.mark.parametrize("seed", range(5))
def test_ppo_clip_matches_loop(agg, per_token_adv, seed):
    logp, old, adv, mask = _random_inputs(seed, per_token_adv=per_token_adv)
    clip_low, clip_high, c = 0.2, 0.28, 3.0
    loss, metrics = ppo_clip_loss(logp, old, adv, mask, clip_low=clip_low, clip_high=clip_high, dual_clip_c=c, agg=agg)
    b, length = logp.shape
    token_losses = [
        [_slow_token_loss(logp[i, t].item(), old[i, t].item(), (adv[i, t] if per_token_adv else adv[i]).item(),
                          clip_low, clip_high, c) for t in range(length)]
        for i in range(b)
    ]
    want = _slow_aggregate(token_losses, mask.tolist(), agg)
    assert loss.item() == pytest.approx(want, rel=1e-10, abs=1e-12)
    # approx_kl and ratio_mean by hand
    toks = [(i, t) for i in range(b) for t in range(length) if mask[i, t]]
    assert metrics["approx_kl"] == pytest.approx(sum(old[i, t].item() - logp[i, t].item() for i, t in toks) / len(toks))
    ratios = [math.exp(logp[i, t].item() - old[i, t].item()) for i, t in toks]
    assert metrics["ratio_mean"] == pytest.approx(sum(ratios) / len(toks))


def test_clip_and_dual_clip_fractions_by_hand():
    # one row, 5 tokens; old log-prob 0, so ratio = exp(logp)
    ratios = [1.0, 1.5, 0.5, 5.0, 1.1]
    advs = [1.0, 1.0, -1.0, -1.0, -1.0]
    # token 0: ratio 1, no clip.            loss -1
    # token 1: A>0, ratio 1.5 > 1.2 -> clip. loss -1.2
    # token 2: A<0, ratio 0.5 < 0.8 -> clip. loss max(0.5, 0.8) = 0.8
    # token 3: A<0, ratio 5: PPO clip inactive (max(5, 1.2) = 5); dual cap 3*|A| = 3 -> loss 3
    # token 4: A<0, ratio 1.1 inside range. loss 1.1
    logp = torch.tensor([[math.log(r) for r in ratios]], dtype=torch.float64)
    old = torch.zeros_like(logp)
    adv = torch.tensor([advs], dtype=torch.float64)
    mask = torch.ones_like(logp)
    loss, m = ppo_clip_loss(logp, old, adv, mask, clip_low=0.2, clip_high=0.2, dual_clip_c=3.0)
    assert m["clip_frac"] == pytest.approx(2 / 5)  # tokens 1 and 2
    assert m["dual_clip_frac"] == pytest.approx(1 / 5)  # token 3
    assert loss.item() == pytest.approx((-1 - 1.2 + 0.8 + 3 + 1.1) / 5)
    assert m["ratio_mean"] == pytest.approx(sum(ratios) / 5)
    # masking token 3 out removes it from every metric
    mask[0, 3] = 0
    loss, m = ppo_clip_loss(logp, old, adv, mask)
    assert m["dual_clip_frac"] == 0.0 and m["clip_frac"] == pytest.approx(2 / 4)
    assert loss.item() == pytest.approx((-1 - 1.2 + 0.8 + 1.1) / 4)


def test_clipped_tokens_get_zero_gradient():
    ratios = [1.0, 1.5, 0.5, 5.0, 1.1, 0.9]
    advs = [1.0, 1.0, -1.0, -1.0, -1.0, 1.0]
    logp = torch.tensor([[math.log(r) for r in ratios]], dtype=torch.float64, requires_grad=True)
    old = torch.zeros(1, 6, dtype=torch.float64)
    mask = torch.ones(1, 6)
    mask[0, 5] = 0  # padding gets no gradient either
    loss, _ = ppo_clip_loss(logp, old, torch.tensor([advs], dtype=torch.float64), mask)
    loss.backward()
    grad = logp.grad[0]
    # d/dlogp of -A*ratio is -A*ratio; token-mean over 5 tokens divides by 5
    assert grad[0].item() == pytest.approx(-1.0 / 5)
    assert grad[1].item() == 0.0  # PPO clip (A>0, ratio above 1+eps)
    assert grad[2].item() == 0.0  # PPO clip (A<0, ratio below 1-eps)
    assert grad[3].item() == 0.0  # dual clip
    assert grad[4].item() == pytest.approx(1.1 / 5)
    assert grad[5].item() == 0.0  # masked


def test_garbage_in_padding_does_not_leak():
    logp = torch.tensor([[-1.0, -float("inf")]], requires_grad=True)
    old = torch.tensor([[-1.0, float("nan")]])
    loss, m = ppo_clip_loss(logp, old, torch.tensor([1.0]), torch.tensor([[1, 0]]))
    loss.backward()
    assert loss.item() == pytest.approx(-1.0) and math.isfinite(m["approx_kl"])
    assert torch.isfinite(logp.grad).all()


@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"])
def test_vanilla_pg_matches_loop(agg):
    logp, old, adv, mask = _random_inputs(11)
    loss, metrics = POLICY_LOSSES.get("vanilla_pg")(logp, old, adv, mask, agg=agg)
    values = [[-adv[i].item() * logp[i, t].item() for t in range(logp.shape[1])] for i in range(logp.shape[0])]
    assert loss.item() == pytest.approx(_slow_aggregate(values, mask.tolist(), agg), rel=1e-10)
    assert set(metrics) == {"clip_frac", "dual_clip_frac", "approx_kl", "ratio_mean"}


def test_ppo_equals_vanilla_gradient_on_policy():
    # at ratio 1 nothing is clipped and both losses have gradient -A * grad(logp)
    logp, _, adv, mask = _random_inputs(3)
    a = logp.clone().requires_grad_(True)
    b = logp.clone().requires_grad_(True)
    ppo_clip_loss(a, logp, adv, mask)[0].backward()
    POLICY_LOSSES.get("vanilla_pg")(b, logp, adv, mask)[0].backward()
    assert torch.allclose(a.grad, b.grad)


def test_aggregate_hand_example():
    values = torch.tensor([[1.0, 2.0, 3.0], [4.0, 0.0, 0.0], [9.0, 9.0, 9.0]])
    mask = torch.tensor([[1, 1, 1], [1, 0, 0], [0, 0, 0]])
    assert aggregate(values, mask, "token-mean").item() == pytest.approx(10 / 4)
    assert aggregate(values, mask, "seq-mean-token-mean").item() == pytest.approx((2 + 4) / 2)
    assert aggregate(values, mask, "seq-mean-token-sum").item() == pytest.approx((6 + 4) / 2)
    assert aggregate(values, torch.zeros_like(mask), "token-mean").item() == 0.0


def test_errors_name_value_and_fix():
    logp = torch.zeros(2, 3)
    with pytest.raises(ValueError, match=r"dual_clip_c=0\.5 must be > 1.*dual_clip_c=3\.0"):
        ppo_clip_loss(logp, logp, torch.zeros(2), torch.ones(2, 3), dual_clip_c=0.5)
    with pytest.raises(ValueError, match=r"dual_clip_c=1"):
        ppo_clip_loss(logp, logp, torch.zeros(2), torch.ones(2, 3), dual_clip_c=1)
    with pytest.raises(ValueError, match=r"advantages must be \(2,\)"):
        ppo_clip_loss(logp, logp, torch.zeros(3), torch.ones(2, 3))
    with pytest.raises(ValueError, match="mask has shape"):
        ppo_clip_loss(logp, logp, torch.zeros(2), torch.ones(2, 4))
    with pytest.raises(ValueError, match="unknown loss aggregation mode 'sum'.*token-mean"):
        aggregate(logp, torch.ones(2, 3), "sum")
    with pytest.raises(ValueError, match="ppo_clip, vanilla_pg"):
        POLICY_LOSSES.get("grpo")
    # dual clip can be switched off explicitly
    loss, m = ppo_clip_loss(torch.full((1, 1), math.log(10.0)), torch.zeros(1, 1), torch.tensor([-1.0]),
                            torch.ones(1, 1), dual_clip_c=math.inf)
    assert loss.item() == pytest.approx(10.0) and m["dual_clip_frac"] == 0.0
