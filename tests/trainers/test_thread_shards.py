"""SFT steps in thread shards: the shards' summed gradients are the batch's gradient (float64, against the
one-pass step), the shards balance by length, and an SFT run with two shards trains the model the
one-pass run trains, step for step up to float rounding; the optimizer step in the shard threads is the
plain one bit for bit."""

from __future__ import annotations

import json

import pytest
import torch

from envace.data.config import DataConfig
from envace.models.loading import load_policy
from envace.thread_shards import (
    PARALLEL_STEP_MIN_PARAMS,
    ShardedOptimizer,
    ShardRunner,
    add_grads,
    balanced_shards,
    one_torch_thread,
)
from envace.trainers import sft as sft_module
from envace.trainers.config import SFTConfig
from envace.trainers.sft import batch_loss, loss_tokens, sft, shard_grads, sharded_batch_grads
from envace.trainers.sft_samples import build_samples
from envace.worlds.generator import generate_tasks


@pytest.fixture(scope="module")
def samples(tiny_model_dir):
    tok = load_policy(tiny_model_dir)[1]
    return build_samples(generate_tasks(18, "train", 3), tok, SFTConfig(model="m")), tok


def test_balanced_shards_largest_first_to_the_lightest_shard():
    # sizes 5,1,4,2,3: 5->A, 4->B, 3->B (4 < 5), 2->A (5 < 7), 1->A (7 = 7, the lower shard)
    assert balanced_shards([5, 1, 4, 2, 3], 2) == [[0, 1, 3], [2, 4]]
    assert balanced_shards([5, 1, 4, 2, 3], 3) == [[0], [1, 2], [3, 4]]  # 5->A 4->B 3->C 2->C 1->B
    assert balanced_shards([7, 7], 4) == [[0], [1]]  # never an empty shard
    assert balanced_shards([3], 2) == [[0]]
    assert balanced_shards([], 2) == []
    with pytest.raises(ValueError, match="n_shards"):
        balanced_shards([1], 0)


@pytest.mark.parametrize("share_prefix", [True, False])
@pytest.mark.parametrize("role", ["act", "rehearse"])
def test_shard_gradients_sum_to_the_batch_gradient(samples, tiny_model_dir, share_prefix, role):
    (acts, rehs), tok = samples
    batch = (acts if role == "act" else rehs)[:9]
    parts = balanced_shards([len(s.ids) for s in batch], 2)
    # the shards hold different numbers of loss tokens, so a plain mean of the shard losses would be wrong
    shard_tokens = [sum(loss_tokens(batch[i]) for i in idx) for idx in parts]
    assert shard_tokens[0] != shard_tokens[1]
    model = load_policy(tiny_model_dir)[0].double()
    model.zero_grad()
    want_loss, want_rows = batch_loss(model, batch, tok.pad_token_id, share_prefix)
    want_loss.backward()
    want = [p.grad.clone() for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    with ShardRunner(2) as runner, one_torch_thread():
        loss, rows = sharded_batch_grads(model, batch, tok.pad_token_id, share_prefix, runner)
    # the bar test_sft holds the shared-prefix path to against the per-sample loop (float64): a shard's
    # common prefix and passes differ from the whole batch's, so the sums run in another order
    assert float(loss) == pytest.approx(float(want_loss.detach()), abs=1e-9)
    assert rows == pytest.approx(want_rows, abs=1e-9)
    for p, w in zip(model.parameters(), want):
        torch.testing.assert_close(p.grad, w, atol=1e-7, rtol=0)


def test_runner_grads_come_back_in_closure_order_and_untouched_params_get_none():
    a = torch.tensor([1.0, 2.0], dtype=torch.float64, requires_grad=True)
    b = torch.tensor([3.0], dtype=torch.float64, requires_grad=True)
    unused = torch.zeros(1, requires_grad=True)
    def with_value(loss):
        return loss, float(loss)

    with ShardRunner(2) as runner:
        results = runner.grads([a, b, unused], [lambda: with_value((a * a).sum()),
                                                lambda: with_value(3 * a[0] + (b * b).sum())])
    assert [payload for payload, _ in results] == [5.0, 12.0]  # the closures' own values, in closure order
    assert a.grad is None  # grads() writes nothing; add_grads sums in the order given
    for _, grads in results:
        add_grads([a, b, unused], grads)
    torch.testing.assert_close(a.grad, torch.tensor([2.0 + 3.0, 4.0], dtype=torch.float64))  # 2a + (3, 0)
    torch.testing.assert_close(b.grad, torch.tensor([6.0], dtype=torch.float64))
    assert unused.grad is None
    with pytest.raises(ValueError, match=">= 2 threads"):
        ShardRunner(1)


@pytest.mark.parametrize("min_params", [0, PARALLEL_STEP_MIN_PARAMS])  # in two threads, and whole (a small model)
@pytest.mark.parametrize("max_norm", [1e-3, 1e6])  # clipped, and not
def test_the_optimizer_step_in_the_shard_threads_is_the_plain_step_bit_for_bit(samples, tiny_model_dir, max_norm,
                                                                              min_params):
    """Three steps from the same shard gradients: ShardedOptimizer (each part summed, normed, scaled and
    stepped in its thread; one part on the calling thread below `min_params`) against add_grads +
    clip_grad_norm_ + one AdamW over all parameters."""
    (acts, _), tok = samples
    plain_model, split_model = load_policy(tiny_model_dir)[0], load_policy(tiny_model_dir)[0]
    adamw = lambda ps: torch.optim.AdamW(ps, lr=1e-2, weight_decay=0.1)  # noqa: E731
    plain_params, split_params = list(plain_model.parameters()), list(split_model.parameters())
    plain = adamw(plain_params)
    with ShardRunner(2) as runner, one_torch_thread():
        split = ShardedOptimizer(split_params, runner, adamw, min_params=min_params)
        parts = 2 if min_params == 0 else 1  # the test model has ~0.1 M parameters
        assert len(split.parts) == parts
        assert sorted(i for part in split.parts for i in part) == list(range(len(split_params)))
        assert len(split.param_groups) == parts
        for step in range(3):
            _, _, grads = shard_grads(plain_model, acts[4 * step: 4 * step + 6], tok.pad_token_id, True, runner)
            plain.zero_grad(set_to_none=True)
            for shard in grads:
                add_grads(plain_params, [g.clone() for g in shard])
            want_norm = torch.nn.utils.clip_grad_norm_(plain_params, max_norm)
            plain.step()
            norm = split.step([[g.clone() for g in shard] for shard in grads], max_norm)
            assert torch.equal(norm, want_norm)
            for i, (p, q) in enumerate(zip(plain_params, split_params)):
                assert torch.equal(p, q), (step, i)
    moved = max(float((p - q).abs().max()) for p, q in zip(load_policy(tiny_model_dir)[0].parameters(), split_params))
    assert moved > 1e-4


def test_one_torch_thread_restores_the_setting():
    before = torch.get_num_threads()
    with one_torch_thread():
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before


def test_sft_with_two_shards_trains_what_the_one_pass_sft_trains(tiny_model_dir, tmp_path, monkeypatch):
    """Same data, seed and schedule: the two-shard run's final weights equal the one-pass run's up to
    float32 rounding over 6 steps, and its summary says it ran in shards."""
    common = dict(model=str(tiny_model_dir), steps=6, batch_size=8, lr=1e-3, warmup_steps=2, progress=False,
                  threads=1, data=DataConfig(n_tasks=30, seed=0))
    one = sft(SFTConfig(out_dir=str(tmp_path / "one"), shards=1, **common))
    calls = []
    real = sft_module.shard_grads
    monkeypatch.setattr(sft_module, "shard_grads", lambda *a: calls.append(1) or real(*a))
    two = sft(SFTConfig(out_dir=str(tmp_path / "two"), shards=2, **common))
    assert len(calls) == 6 and one["shards"] == 1 and two["shards"] == 2
    assert json.loads((tmp_path / "two" / "sft_summary.json").read_text())["shards"] == 2
    m1, m2 = load_policy(one["model_dir"])[0], load_policy(two["model_dir"])[0]
    moved = max(float((p - q).detach().abs().max()) for p, q in zip(load_policy(tiny_model_dir)[0].parameters(),
                                                              m1.parameters()))
    assert moved > 1e-4  # the steps did move the weights
    for (name, p), q in zip(m1.named_parameters(), m2.parameters()):
        torch.testing.assert_close(q, p, atol=2e-5, rtol=0, msg=name)
    assert two["act_loss"] == pytest.approx(one["act_loss"], abs=1e-4)
    assert two["rehearse_loss"] == pytest.approx(one["rehearse_loss"], abs=1e-4)
