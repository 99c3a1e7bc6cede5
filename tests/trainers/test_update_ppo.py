"""PPO reuse of one rollout batch (epochs x mini-batches = optimizer steps, the ratio starts at 1 and moves
off-policy), the loss function's own metrics per role, and the gradient noise scale estimator."""

from __future__ import annotations

import copy
import math

import pytest
import torch

from envace.algos import role_grpo_advantages
from envace.config import ConfigError
from envace.models.loading import load_policy
from envace.trainers.config import AlgoConfig
from envace.trainers.noise_scale import NoiseAccumulator, estimate
from envace.trainers.update import policy_update, split_mini_batches
from envace.trainers.packing import pack_rows


def _with_advantages(rows):
    rows = copy.deepcopy(rows)
    adv = role_grpo_advantages(torch.tensor([r.reward for r in rows]), [r.prompt_index for r in rows],
                               [r.trajectory_key for r in rows], [r.role for r in rows])
    for r, a in zip(rows, adv.tolist()):
        r.advantage = a
    return rows


def test_two_epochs_of_four_mini_batches_take_eight_steps(tiny_model_dir, role_rows):
    rows = _with_advantages(role_rows)
    model, tok = load_policy(tiny_model_dir)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-2, weight_decay=0.0)  # large: the policy must move
    algo = AlgoConfig(ppo_epochs=2, ppo_mini_batches=4)
    res = policy_update(model, opt, rows, algo, pad_id=tok.pad_token_id, micro_batch=2, grad_clip=1e9, seed=7)
    assert len(res.steps) == 8 and res.metrics["optimizer_steps"] == 8
    assert {int(s["step"]) for s in opt.state.values()} == {8}  # AdamW counted 8 steps on every parameter
    assert [(s.epoch, s.mini_batch) for s in res.steps] == [(e, m) for e in range(2) for m in range(4)]
    assert sum(s.rows for s in res.steps[:4]) == len(rows) == sum(s.rows for s in res.steps[4:])
    first = res.steps[0].metrics
    # old log-probs are the sampling engine's; before any update they equal the recomputation (to 1e-4)
    assert first["ratio_mean"] == pytest.approx(1.0, abs=1e-4)
    assert first["clip_frac"] == 0.0 and abs(first["approx_kl"]) < 1e-4
    later = [s.metrics for s in res.steps[1:]]
    assert all(abs(m["ratio_mean"] - 1) > 1e-3 for m in later)
    assert max(m["clip_frac"] for m in later) > 0.1
    # the per-role metrics are the same loss-function values, token-weighted over the 8 steps
    tokens = sum(s.tokens for s in res.steps)
    for key in ("clip_frac", "ratio_mean", "approx_kl", "dual_clip_frac"):
        want = sum(s.metrics[key] * s.tokens for s in res.steps) / tokens
        got = sum(v[key] * v["tokens"] for v in res.role_metrics.values()) / sum(v["tokens"] for v in
                                                                               res.role_metrics.values())
        assert got == pytest.approx(want, rel=1e-9, abs=1e-12)


def test_mini_batch_order_comes_from_the_seed(tiny_model_dir, role_rows):
    rows = _with_advantages(role_rows)
    runs = []
    for seed in (1, 1, 2):
        model, tok = load_policy(tiny_model_dir)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
        res = policy_update(model, opt, rows, AlgoConfig(ppo_mini_batches=4), pad_id=tok.pad_token_id,
                            micro_batch=4, grad_clip=1.0, seed=seed)
        runs.append([s.loss for s in res.steps])
    assert runs[0] == runs[1] and runs[0] != runs[2]


def test_one_epoch_one_mini_batch_is_one_on_policy_step(tiny_model_dir, role_rows):
    rows = _with_advantages(role_rows)
    model, tok = load_policy(tiny_model_dir)
    res = policy_update(model, torch.optim.AdamW(model.parameters(), lr=1e-3), rows, AlgoConfig(),
                        pad_id=tok.pad_token_id, micro_batch=3, grad_clip=1.0)
    assert len(res.steps) == 1 and res.loss == res.steps[0].loss
    for role, vals in res.role_metrics.items():
        assert vals["ratio_mean"] == pytest.approx(1.0, abs=1e-4) and vals["clip_frac"] == 0.0
        assert vals["entropy"] > 0 and vals["tokens"] == sum(len(r.response_ids) for r in rows if r.role.value == role)
        assert "grad_noise_scale" in vals  # >= 2 micro-batches per role
    assert "grad_noise_scale" in res.metrics and math.isfinite(res.metrics["grad_noise_scale"])


def test_split_mini_batches_balances_tokens_and_never_leaves_one_empty(role_rows):
    packs = pack_rows(role_rows, "off")
    for n in (1, 2, 4, len(packs), len(packs) + 3):
        chunks = split_mini_batches(packs, n)
        assert len(chunks) == min(n, len(packs)) and all(chunks)
        assert [p for c in chunks for p in c] == packs


def test_vanilla_pg_refuses_reuse():
    with pytest.raises((ConfigError, ValueError), match="algo.loss='vanilla_pg'.*ppo_epochs=2"):
        AlgoConfig(loss="vanilla_pg", ppo_epochs=2)
    with pytest.raises(ValueError, match="ppo_mini_batches"):
        AlgoConfig(ppo_mini_batches=0)


def test_noise_estimator_hand_worked():
    # two micro-batches of 2 rows, |g_i|^2 = 6 and 4 (mean 5), big batch of 4 rows with |g_B|^2 = 3:
    # tr(Sigma) = (5 - 3) / (1/2 - 1/4) = 8, |G|^2 = 3 - 8/4 = 1, B_simple = 8
    est = estimate([6.0, 4.0], [2, 2], 3.0, 4)
    assert (est.trace, est.g2) == (8.0, 1.0)
    acc = NoiseAccumulator()
    acc.add(est)
    acc.add(estimate([10.0, 2.0], [1, 3], 2.0, 4))  # mean 1/b = 2/3: trace = 4 / (2/3 - 1/4) = 9.6, |G|^2 = -0.4
    acc.add(estimate([1.0], [1], 1.0, 1))            # one micro-batch: no estimate
    s = acc.summary()
    assert s["grad_trace_sigma_est"] == pytest.approx((8 + 9.6) / 2)
    assert s["grad_sq_norm_est"] == pytest.approx((1 - 0.4) / 2)
    assert s["grad_noise_scale"] == pytest.approx(8.8 / 0.3)


def test_noise_estimator_recovers_a_known_noise_scale():
    # per-sample gradients G + N(0, sigma^2 I) in d dims: tr(Sigma) = d sigma^2, B_simple = d sigma^2 / |G|^2
    g = torch.Generator().manual_seed(0)
    d, sigma, sizes = 50, 0.5, [3, 5, 8, 4]
    true_g = torch.randn(d, generator=g, dtype=torch.float64) * 0.3
    acc = NoiseAccumulator()
    for _ in range(3000):
        means = [true_g + sigma * torch.randn(b, d, generator=g, dtype=torch.float64).mean(0) for b in sizes]
        big = sum(b * m for b, m in zip(sizes, means)) / sum(sizes)
        acc.add(estimate([float(m.square().sum()) for m in means], sizes, float(big.square().sum()), sum(sizes)))
    want = d * sigma ** 2 / float(true_g.square().sum())
    assert acc.summary()["grad_noise_scale"] == pytest.approx(want, rel=0.05)
