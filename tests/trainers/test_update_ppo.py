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
from envace.trainers.noise_scale import NoiseAccumulator, split_half
from envace.trainers.packing import pack_rows
from envace.trainers.update import policy_update, split_mini_batches


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
        assert "grad_noise_scale" in vals  # both halves of the prompts hold rows of each role
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
    # halves of 2 and 3 prompts with mean gradients g_A = (1, 2), g_B = (3, 0):
    # |G|^2 = g_A . g_B = 3; tr(Sigma) = |g_A - g_B|^2 / (1/2 + 1/3) = 8 / (5/6) = 9.6
    est = split_half(torch.tensor([1.0, 2.0]), torch.tensor([3.0, 0.0]), 2, 3)
    assert est.g2 == pytest.approx(3.0) and est.trace == pytest.approx(9.6)
    acc = NoiseAccumulator()
    acc.add(est)
    acc.add(split_half(torch.tensor([1.0, -1.0]), torch.tensor([-1.0, 0.0]), 1, 1))  # |G|^2 -1, trace 5 / 2 = 2.5
    acc.add(split_half(torch.tensor([1.0]), torch.tensor([1.0]), 0, 3))                 # an empty half: no estimate
    s = acc.summary()
    assert s["grad_trace_sigma_est"] == pytest.approx((9.6 + 2.5) / 2)
    assert s["grad_sq_norm_est"] == pytest.approx((3 - 1) / 2)
    assert s["grad_noise_scale"] == pytest.approx(12.1 / 2)


def test_noise_estimator_recovers_a_known_noise_scale():
    # per-prompt gradients G + N(0, sigma^2 I) in d dims: tr(Sigma) = d sigma^2, B_simple = d sigma^2 / |G|^2
    g = torch.Generator().manual_seed(0)
    d, sigma, (n_a, n_b) = 50, 0.5, (5, 7)
    true_g = torch.randn(d, generator=g, dtype=torch.float64) * 0.3
    acc = NoiseAccumulator()
    for _ in range(3000):
        g_a = true_g + sigma * torch.randn(n_a, d, generator=g, dtype=torch.float64).mean(0)
        g_b = true_g + sigma * torch.randn(n_b, d, generator=g, dtype=torch.float64).mean(0)
        acc.add(split_half(g_a, g_b, n_a, n_b))
    want = d * sigma ** 2 / float(true_g.square().sum())
    assert acc.summary()["grad_noise_scale"] == pytest.approx(want, rel=0.05)


def test_noise_estimator_is_not_fooled_by_stratified_micro_batches():
    # the micro-batches of an update hold one role and similar lengths, so their means differ by stratum
    # (here +-S): the small/big-batch pair of the paper then reads |G|^2 - |S|^2 (negative), the split-half
    # of prompts (each prompt has rows of both strata) reads |G|^2
    g = torch.Generator().manual_seed(1)
    d, sigma, prompts = 20, 0.3, 16
    true_g = torch.full((d,), 0.1, dtype=torch.float64)
    stratum = torch.randn(d, generator=g, dtype=torch.float64)
    acc = NoiseAccumulator()
    for _ in range(2000):
        # each prompt contributes one row of each stratum: rows G + S + noise and G - S + noise
        up = true_g + stratum + sigma * torch.randn(prompts, d, generator=g, dtype=torch.float64)
        down = true_g - stratum + sigma * torch.randn(prompts, d, generator=g, dtype=torch.float64)
        per_prompt = (up + down) / 2
        perm = torch.randperm(prompts, generator=g)
        a, b = perm[: prompts // 2], perm[prompts // 2:]
        acc.add(split_half(per_prompt[a].mean(0), per_prompt[b].mean(0), len(a), len(b)))
    assert acc.summary()["grad_sq_norm_est"] == pytest.approx(float(true_g.square().sum()), rel=0.1)


def test_noise_tracking_leaves_the_update_unchanged(tiny_model_dir, role_rows):
    # tracking reorders micro-batches (half A's prompts, then half B's); the loss and the step are the same
    rows = _with_advantages(role_rows)
    params, losses = [], []
    for track in (False, True):
        model, tok = load_policy(tiny_model_dir)
        opt = torch.optim.SGD(model.parameters(), lr=1.0)
        res = policy_update(model, opt, rows, AlgoConfig(grad_noise_scale=track), pad_id=tok.pad_token_id,
                            micro_batch=2, grad_clip=1e9, seed=3)
        params.append(torch.cat([p.detach().reshape(-1) for p in model.parameters()]))
        losses.append(res.loss)
        assert ("grad_noise_scale" in res.metrics) == track
    assert losses[1] == pytest.approx(losses[0], abs=1e-7)
    start = torch.cat([p.detach().reshape(-1) for p in load_policy(tiny_model_dir)[0].parameters()])
    moved = (params[0] - start).abs().max()
    assert moved > 1e-4  # the step did move the policy, and both moved it the same way
    assert (params[1] - params[0]).abs().max() < 1e-3 * moved
