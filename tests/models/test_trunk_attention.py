"""envace.models.trunk_attention: the branch pass's attention split at the trunk gives what one masked softmax
over per-row copies of the trunk's keys gives, forward and backward, computed here by torch's own
scaled_dot_product_attention; a loaded CPU model's branch passes take it."""

from __future__ import annotations

import shutil

import pytest
import torch
from transformers import AutoModelForCausalLM

from envace.engines.logprobs import trunk_split_supported
from envace.models.attention import sdpa_native_gqa
from envace.models.loading import load_policy
from envace.models.trunk_attention import TRUNK_KWARG, BranchTrunks, split_attention, trunk_layout


def _case(dtype, heads: int, kv_heads: int, trunks: list[int], gen: torch.Generator):
    """Three trunks of 7 columns (two padded), branch rows of 5 columns continuing `trunks`."""
    p, tt, tb, hd = 3, 7, 5, 8
    b = len(trunks)

    def rand(*shape):
        return torch.randn(*shape, generator=gen, dtype=dtype).requires_grad_()

    tk, tv = rand(p, kv_heads, tt, hd), rand(p, kv_heads, tt, hd)
    q, k, v = rand(b, heads, tb, hd), rand(b, kv_heads, tb, hd), rand(b, kv_heads, tb, hd)
    valid = torch.arange(tt)[None] < torch.tensor([7, 4, 6])[:, None]
    return q, k, v, tk, tv, valid, torch.tensor(trunks)


def _copies(q, k, v, tk, tv, valid, trunks, scale):
    """One softmax over [the row's own copy of its trunk's columns, its causal branch columns]."""
    b, tb, tt = q.shape[0], q.shape[2], tk.shape[2]
    keys, values = torch.cat([tk[trunks], k], 2), torch.cat([tv[trunks], v], 2)
    causal = torch.ones(tb, tb, dtype=torch.bool).tril()
    mask = torch.cat([valid[trunks][:, None].expand(b, tb, tt), causal.expand(b, tb, tb)], 2)[:, None]
    return torch.nn.functional.scaled_dot_product_attention(q, keys, values, attn_mask=mask, scale=scale,
                                                            enable_gqa=q.shape[1] != k.shape[1])


@pytest.mark.parametrize("dtype, tol", [(torch.float64, 1e-12), (torch.float32, 1e-5), (torch.bfloat16, 3e-2)])
@pytest.mark.parametrize("heads, kv_heads", [(4, 2), (2, 2)])
@pytest.mark.parametrize("trunks", [[2, 0, 2, 2, 0], [0, 0, 1, 1, 2, 2], [1]])
def test_split_equals_one_softmax_over_copies(dtype, tol, heads, kv_heads, trunks):
    gen = torch.Generator().manual_seed(len(trunks) * 10 + heads)
    q, k, v, tk, tv, valid, rows = _case(dtype, heads, kv_heads, trunks, gen)
    scale = q.shape[-1] ** -0.5
    out = split_attention(q, k, v, BranchTrunks([(tk, tv)], valid, rows), 0, scale)
    ref = _copies(q, k, v, tk, tv, valid, rows, scale)
    assert torch.allclose(out, ref, atol=tol, rtol=0)
    grad = torch.randn(out.shape, generator=gen, dtype=dtype)
    inputs = [q, k, v, tk, tv]
    for name, got, want in zip("q k v trunk_k trunk_v".split(), torch.autograd.grad(out, inputs, grad),
                               torch.autograd.grad(ref, inputs, grad)):
        assert torch.allclose(got, want, atol=tol * 10, rtol=0), name


def test_layout_places_rows_in_their_trunks_blocks_by_hand():
    valid = torch.tensor([[True, True, False], [True, False, False], [True, True, True]])
    lay = trunk_layout(valid, torch.tensor([2, 0, 2, 2, 0]), torch.float32)
    assert lay.used.tolist() == [0, 2] and not lay.all_used
    assert lay.group.tolist() == [1, 0, 1, 1, 0]
    assert lay.slot.tolist() == [0, 0, 1, 2, 1]
    assert lay.slots == 3
    assert lay.mask[:, 0, 0].tolist() == [[0.0, 0.0, float("-inf")], [0.0, 0.0, 0.0]]


def test_a_loaded_cpu_model_splits_and_transformers_sdpa_does_not(tiny_dir):
    model, _ = load_policy(tiny_dir, device="cpu")
    assert trunk_split_supported(model)
    assert not trunk_split_supported(AutoModelForCausalLM.from_pretrained(tiny_dir, attn_implementation="sdpa"))
    model.config.attention_dropout = 0.1
    assert not trunk_split_supported(model)


def test_dropout_with_trunks_is_refused():
    gen = torch.Generator().manual_seed(0)
    q, k, v, tk, tv, valid, rows = _case(torch.float32, 4, 2, [0], gen)
    module = torch.nn.Module()
    module.layer_idx = 0
    with pytest.raises(ValueError, match="without dropout"):
        sdpa_native_gqa(module, q, k, v, None, dropout=0.1, **{TRUNK_KWARG: BranchTrunks([(tk, tv)], valid, rows)})


def test_a_pass_splits_only_where_its_trunk_is_at_least_as_wide_as_its_branches(tiny_dir, monkeypatch):
    """prefix_logprobs hands the trunks over on the passes `split_pays` picks, and keeps the copies elsewhere;
    both give the same log-probs."""
    import envace.engines.logprobs as logprobs

    model, _ = load_policy(tiny_dir, device="cpu")
    seen = []
    monkeypatch.setattr(logprobs, "BranchTrunks", lambda *a: seen.append(a[2].tolist()) or BranchTrunks(*a))
    gen = torch.Generator().manual_seed(0)
    vocab = model.config.vocab_size
    trunks = torch.randint(5, vocab, (2, 6), generator=gen)
    narrow = torch.randint(5, vocab, (3, 4), generator=gen)  # 4 <= 6 columns: split
    wide = torch.randint(5, vocab, (2, 9), generator=gen)  # 9 > 6: copies
    chunks = [(narrow, torch.tensor([4, 4, 2]), torch.tensor([0, 0, 1])),
              (wide, torch.tensor([9, 7]), torch.tensor([1, 0]))]
    read = torch.tensor([3, 12, 13, 20, 24, 26, 33])
    targets = torch.randint(5, vocab, (7,), generator=gen)
    with torch.no_grad():
        got, _ = logprobs.prefix_logprobs(model, trunks, torch.tensor([6, 5]), chunks, read, targets, torch.ones(7))
        assert seen == [[0, 0, 1]]
        monkeypatch.setattr(logprobs, "trunk_split_supported", lambda m: False)
        want, _ = logprobs.prefix_logprobs(model, trunks, torch.tensor([6, 5]), chunks, read, targets, torch.ones(7))
    assert seen == [[0, 0, 1]]
    assert torch.allclose(got, want, atol=1e-6, rtol=0)


@pytest.mark.parametrize("arch", ["qwen3", "llama"])
def test_branch_passes_equal_whole_sequences_on_both_architectures(tiny_dir, tmp_path, arch, monkeypatch):
    """A loaded CPU model's prefix pass (trunks read nowhere: stopped at their last keys; branches split at the
    trunk) gives each read position the log-prob and gradient that a plain forward of its whole sequence
    (trunk + branch, eager attention) gives. Llama: the SmolLM2 family's layout (no q/k norms)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    import envace.engines.logprobs as logprobs

    model_dir = tiny_dir
    if arch == "llama":
        q = AutoModelForCausalLM.from_pretrained(tiny_dir).config
        cfg = LlamaConfig(vocab_size=q.vocab_size, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                          num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True)
        torch.manual_seed(0)
        model_dir = tmp_path / "llama"
        LlamaForCausalLM(cfg).save_pretrained(model_dir)
        for f in tiny_dir.glob("*token*"):  # the tiny model's tokenizer files
            shutil.copy(f, model_dir / f.name)
    model, _ = load_policy(model_dir, device="cpu")
    eager = AutoModelForCausalLM.from_pretrained(model_dir, attn_implementation="eager")
    gen = torch.Generator().manual_seed(1)
    vocab = model.config.vocab_size
    trunk_lens = [7, 5]
    trunks = torch.randint(5, vocab, (2, 7), generator=gen)
    branches = torch.randint(5, vocab, (4, 5), generator=gen)
    lens, of = [5, 3, 5, 4], [0, 0, 1, 1]
    # read positions (state-table rows after the 2 x 7 trunk rows) of every real branch token
    read = [14 + r * 5 + t for r in range(4) for t in range(lens[r])]
    targets = torch.randint(5, vocab, (len(read),), generator=gen)
    stopped = []
    real_keys = logprobs.trunk_keys
    monkeypatch.setattr(logprobs, "trunk_keys", lambda net, ids: stopped.append(1) or real_keys(net, ids))
    got, _ = logprobs.prefix_logprobs(model, trunks, torch.tensor(trunk_lens),
                                      [(branches, torch.tensor(lens), torch.tensor(of))], torch.tensor(read),
                                      targets, torch.ones(len(read)))
    assert stopped and trunk_split_supported(model)
    got.sum().backward()
    want = []
    for n, pos in enumerate(read):
        r, t = divmod(pos - 14, 5)
        seq = torch.cat([trunks[of[r], :trunk_lens[of[r]]], branches[r, :t + 1]])[None]
        want.append(torch.log_softmax(eager(input_ids=seq).logits[0, -1], -1)[targets[n]])
    want = torch.stack(want)
    want.sum().backward()
    assert torch.allclose(got.detach(), want.detach(), atol=1e-5, rtol=0)
    for (name, p), w in zip(model.named_parameters(), eager.parameters()):
        assert torch.allclose(p.grad, w.grad, atol=1e-5, rtol=1e-4), name
