"""envace.models.attention: a CPU model loaded by load_policy runs `envace_sdpa`, which gives transformers'
`sdpa` results (and the eager path's, computed independently) on masked branch passes, forward and backward,
and leaves no trace in a saved checkpoint."""

from __future__ import annotations

import json

import torch
from transformers import AutoModelForCausalLM

from envace.engines.logprobs import prefix_logprobs
from envace.models.attention import NAME
from envace.models.loading import load_policy


def _reference(tiny_dir, implementation: str):
    return AutoModelForCausalLM.from_pretrained(tiny_dir, dtype=torch.float32,
                                                attn_implementation=implementation).eval()


def _branch_pass(model) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """Log-probs of 8 read positions (real tokens: a branch's padding is never read) over 3 trunks (two padded)
    and 6 branches, and the parameter gradients of their sum: every branch pass carries a mask (the loaded
    model's branch pass splits its attention at the trunk instead, envace.models.trunk_attention)."""
    gen = torch.Generator().manual_seed(0)
    vocab = model.config.vocab_size
    trunks = torch.randint(5, vocab, (3, 20), generator=gen)
    branches = torch.randint(5, vocab, (6, 9), generator=gen)
    read = torch.tensor([0, 5, 19, 60, 61, 70, 100, 107])
    targets = torch.randint(5, vocab, (8,), generator=gen)
    model.zero_grad(set_to_none=True)
    logp, _ = prefix_logprobs(model, trunks, torch.tensor([20, 17, 12]),
                              [(branches, torch.tensor([9, 9, 7, 5, 9, 3]), torch.tensor([0, 0, 1, 1, 2, 2]))],
                              read, targets, torch.ones(8))
    logp.sum().backward()
    return logp.detach(), [p.grad.clone() for p in model.parameters()]


def test_cpu_models_load_with_native_gqa_and_save_without_it(tiny_dir, tmp_path):
    model, _ = load_policy(tiny_dir, device="cpu")
    assert model.config.num_key_value_heads < model.config.num_attention_heads  # grouped heads to test
    assert model.config._attn_implementation == NAME
    model.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    assert not [k for k in saved if "attn" in k], saved  # a checkpoint stays loadable by any runtime
    assert AutoModelForCausalLM.from_pretrained(tmp_path).config._attn_implementation == "sdpa"


def test_masked_passes_match_sdpa_and_eager(tiny_dir):
    model, _ = load_policy(tiny_dir, device="cpu")
    logp, grads = _branch_pass(model)
    for implementation, tol in (("sdpa", 1e-6), ("eager", 1e-5)):
        ref_logp, ref_grads = _branch_pass(_reference(tiny_dir, implementation))
        assert torch.allclose(logp, ref_logp, atol=tol, rtol=0), implementation
        for g, r in zip(grads, ref_grads):
            assert torch.allclose(g, r, atol=tol, rtol=1e-5), implementation


def test_padded_and_causal_forwards_match_sdpa(tiny_dir):
    model, _ = load_policy(tiny_dir, device="cpu")
    ref = _reference(tiny_dir, "sdpa")
    ids = torch.randint(5, model.config.vocab_size, (2, 15), generator=torch.Generator().manual_seed(1))
    mask = torch.ones(2, 15, dtype=torch.long)
    mask[1, 10:] = 0
    with torch.no_grad():
        for kw in ({}, {"attention_mask": mask}):
            assert torch.allclose(model(input_ids=ids, **kw).logits, ref(input_ids=ids, **kw).logits, atol=1e-6)
