"""response_logprobs: one padded forward equals a per-row loop, at each row's temperature, with gradients."""

from __future__ import annotations

import pytest
import torch

from envace.engines.logprobs import entropy_metric, response_logprobs


@pytest.fixture(scope="module")
def model(tiny_dir):
    from envace.models.loading import load_policy

    return load_policy(tiny_dir, device="cpu")[0]


def rows(vocab, seed):
    g = torch.Generator().manual_seed(seed)
    shapes = [(5, 7), (1, 3), (12, 0), (3, 11)]
    prompts = [torch.randint(0, vocab, (p,), generator=g).tolist() for p, _ in shapes]
    responses = [torch.randint(0, vocab, (r,), generator=g).tolist() for _, r in shapes]
    return prompts, responses, [1.0, 0.7, 0.0, 1.6]


def slow(model, prompt, response, temperature):
    """Per-row loop: each response token from the unpadded sequence, at T (1 when greedy)."""
    t = temperature if temperature > 0 else 1.0
    with torch.no_grad():
        logits = model(torch.tensor([prompt + response])).logits[0]
    lps, ents = [], []
    for j, tok in enumerate(response):
        logp = torch.log_softmax(logits[len(prompt) - 1 + j] / t, -1)
        lps.append(float(logp[tok]))
        ents.append(float(-(logp.exp() * logp).sum()))
    return lps, ents


def test_matches_per_row_loop(model):
    prompts, responses, temps = rows(model.config.vocab_size, 0)
    with torch.no_grad():
        lp, mask, ent = response_logprobs(model, prompts, responses, temps, pad_id=0, with_entropy=True)
    assert lp.shape == mask.shape == ent.shape == (4, 11)
    for i, (p, r, t) in enumerate(zip(prompts, responses, temps)):
        want_lp, want_ent = slow(model, p, r, t)
        n = len(r)
        assert mask[i].tolist() == [1.0] * n + [0.0] * (11 - n)
        assert lp[i, :n].tolist() == pytest.approx(want_lp, abs=1e-5)
        assert ent[i, :n].tolist() == pytest.approx(want_ent, abs=1e-5)
        assert lp[i, n:].eq(0).all() and ent[i, n:].eq(0).all()


def test_pad_value_does_not_matter(model):
    prompts, responses, temps = rows(model.config.vocab_size, 1)
    with torch.no_grad():
        a = response_logprobs(model, prompts, responses, temps, pad_id=0)[0]
        b = response_logprobs(model, prompts, responses, temps, pad_id=5)[0]
    assert torch.allclose(a, b, atol=1e-6)


def test_gradients_flow(model):
    prompts, responses, temps = rows(model.config.vocab_size, 2)
    model.zero_grad()
    lp, mask, ent = response_logprobs(model, prompts, responses, temps, pad_id=0)
    assert ent is None and lp.requires_grad
    (lp * mask).sum().backward()
    grad = model.get_input_embeddings().weight.grad
    assert grad is not None and grad.abs().sum() > 0
    model.zero_grad(set_to_none=True)


def test_bad_input_is_named(model):
    with pytest.raises(ValueError, match="prompt 1 is empty"):
        response_logprobs(model, [[1], []], [[2], [3]], [1.0, 1.0], pad_id=0)
    with pytest.raises(ValueError, match="2 prompts, 1 responses and 2 temperatures"):
        response_logprobs(model, [[1], [2]], [[2]], [1.0, 1.0], pad_id=0)


@pytest.mark.parametrize("n, vocab", [(300, 1024), (5, 7), (40, 20_000)])
def test_entropy_metric_in_chunks_is_the_whole_table_expression(n, vocab):
    """Row chunks (128 rows at a 1,024-token vocabulary, 16 at 20,000) give the whole-table values bit for bit,
    with no gradient kept, and the per-row entropy a slow loop computes."""
    logits = torch.randn(n, vocab, generator=torch.Generator().manual_seed(n), requires_grad=True)
    logp_all = torch.log_softmax(logits, dim=-1)
    got = entropy_metric(logp_all)
    assert not got.requires_grad
    assert torch.equal(got, (-(logp_all.exp() * logp_all).sum(-1)).detach())
    for i in (0, n // 2, n - 1):
        p = torch.softmax(logits[i].detach().double(), dim=0)
        assert abs(float(got[i]) - float(-(p * p.log()).sum())) < 1e-4
