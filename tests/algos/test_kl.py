"""KL estimators against hand-computed values, and entropy from logits."""

from __future__ import annotations

import math

import pytest
import torch

from envace.algos import KL_ESTIMATORS, entropy_from_logits, kl_penalty


def test_kinds_hand_values():
    logp = torch.tensor([[-1.0, -2.0, -0.5]], dtype=torch.float64)
    ref = torch.tensor([[-1.5, -1.0, -0.5]], dtype=torch.float64)
    # d = logp - ref = [0.5, -1.0, 0.0]
    assert kl_penalty(logp, ref, "kl")[0].tolist() == pytest.approx([0.5, -1.0, 0.0])
    assert kl_penalty(logp, ref, "abs")[0].tolist() == pytest.approx([0.5, 1.0, 0.0])
    assert kl_penalty(logp, ref, "mse")[0].tolist() == pytest.approx([0.125, 0.5, 0.0])
    # k3 with x = ref - logp = [-0.5, 1.0, 0]: e^x - x - 1
    k3 = [math.exp(-0.5) + 0.5 - 1, math.exp(1.0) - 1.0 - 1, 0.0]
    assert kl_penalty(logp, ref, "low_var_kl")[0].tolist() == pytest.approx(k3)
    assert kl_penalty(logp, ref)[0].tolist() == pytest.approx(k3)  # low_var_kl is the default


def test_low_var_kl_nonnegative_zero_when_equal_and_clamped():
    g = torch.Generator().manual_seed(0)
    logp = -torch.rand(8, 16, generator=g) * 5
    ref = -torch.rand(8, 16, generator=g) * 5
    k3 = kl_penalty(logp, ref, "low_var_kl")
    assert k3.shape == (8, 16) and (k3 >= 0).all() and (k3 > 0).any()
    assert torch.equal(kl_penalty(logp, logp, "low_var_kl"), torch.zeros(8, 16))
    # ref - logp = 20: e^20 - 21 is far above the clamp
    big = kl_penalty(torch.tensor([[-20.0]]), torch.tensor([[0.0]]), "low_var_kl")
    assert big.item() == 10.0


def test_k3_gradient_flows_to_policy_only():
    logp = torch.tensor([[-1.0]], requires_grad=True)
    ref = torch.tensor([[-2.0]], requires_grad=True)
    kl_penalty(logp, ref, "low_var_kl").sum().backward()
    # d/dlogp [e^(ref-logp) - (ref-logp) - 1] = -e^(ref-logp) + 1
    assert logp.grad.item() == pytest.approx(1 - math.exp(-1.0))
    assert ref.grad is None


def test_entropy_from_logits():
    logits = torch.tensor([[[0.0, 0.0, 0.0, 0.0], [100.0, 0.0, 0.0, 0.0], [1.0, 2.0, -float("inf"), 3.0]]])
    h = entropy_from_logits(logits)
    assert h.shape == (1, 3)
    p = [math.exp(v) for v in (1.0, 2.0, 3.0)]
    z = sum(p)
    want_last = -sum(q / z * math.log(q / z) for q in p)
    assert h[0].tolist() == pytest.approx([math.log(4), 0.0, want_last], abs=1e-5)


def test_unknown_kind_and_shape_mismatch():
    assert KL_ESTIMATORS.names() == ["abs", "kl", "low_var_kl", "mse"]
    with pytest.raises(ValueError, match="unknown KL estimator 'k3'; valid names: abs, kl, low_var_kl, mse"):
        kl_penalty(torch.zeros(1, 2), torch.zeros(1, 2), "k3")
    with pytest.raises(ValueError, match="must have the same shape"):
        kl_penalty(torch.zeros(1, 2), torch.zeros(1, 3))
