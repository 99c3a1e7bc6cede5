"""Branch-pass attention split at the trunk: a prompt's keys read once for all the branches that continue it.

A branch pass of the prefix-packed update (envace.engines.logprobs.prefix_logprobs) runs B branch rows of Tb
tokens against the cached keys and values of their P trunks. Handed to a plain attention kernel, every branch
row needs its own copy of its trunk's K/V (an index_select per layer, and in the backward a scatter-add of
the copies' gradients), and each query scores trunk and branch columns under one mask, the branch half of
it causal but computed in full.

Here the softmax over [trunk columns, own branch columns] is split in two and merged by log-sum-exp, as
blockwise (flash) attention merges its key blocks:

- trunk part: the queries of a trunk's branch rows side by side, (used trunks, heads, slots x Tb, hd),
  against that trunk's K/V once, under its padding mask (a trunk with fewer branch rows than the most has
  zero queries in the empty slots: their outputs are never read, their gradients are zero);
- branch part: each row's queries against its own keys, the kernel's causal flag (right padding sits after
  every real token, so no real query sees it);
- out = w_t out_t + w_b out_b with w = exp(lse_part - lse), lse = logaddexp(lse_t, lse_b).

The backward calls torch's CPU flash-attention backward once per part with the merged output and
log-sum-exp: that kernel computes P = exp(S - lse) and D = rowsum(dO * O) from what it is given, so with the
merged pair each part's dQ, dK and dV are exactly the whole softmax's (the standard split used by ring and
blockwise attention). Outputs and gradients match the one-mask pass to float rounding
(tests/models/test_trunk_attention.py, float64).

Forward + backward of one layer's branch attention, one thread, against the per-row copies
(`bench/branch_attention_bench.py --per-trunk 8 ...`, 2026-12-07, 2-core Intel Xeon): with long trunks and
short branches, the shape of tool-call RL (8 or 16 completions of 40-96 tokens after 600-1,500-token prompts),
the split takes 0.54-0.76x the time; at the RL bench's 176-token trunks and 63-token branches 0.83x; where
branches are longer than their trunk it is slower (1.16x at the demo's SFT shape, 231-token branches after an
83-token trunk), so a pass splits only where its trunk is at least as wide as its branches (`split_pays`).

Not in the paper: an execution choice of the embedded CPU backend. It runs where the model's attention is
`envace_sdpa` (envace.models.attention, CPU models) and dropout is off; elsewhere the branch pass keeps the
per-row K/V copies.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

# the keyword under which a branch pass hands its trunks to the attention function
TRUNK_KWARG = "envace_trunk"

_flash = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
_flash_backward = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward


@dataclass
class TrunkLayout:
    """Where each branch row's queries sit in its trunk's query block: trunk `used[group[r]]`, slot `slot[r]`
    of `slots`; `mask` (used, 1, 1, Tt) the additive mask of the trunks' columns (0 on real ones, -inf on
    padding), in the attention's dtype."""

    used: torch.Tensor
    group: torch.Tensor
    slot: torch.Tensor
    slots: int
    mask: torch.Tensor
    all_used: bool


class BranchTrunks:
    """The trunks a branch pass continues: per layer the trunks' keys and values (P, KVH, Tt, hd) after norms
    and RoPE (the model's own KV cache of the trunk pass), `valid` (P, Tt) True on real trunk columns, and the
    trunk each branch row continues (`trunks`, (B,))."""

    def __init__(self, kv: list[tuple[torch.Tensor, torch.Tensor]], valid: torch.Tensor, trunks: torch.Tensor):
        self.kv, self.layout = kv, trunk_layout(valid, trunks, kv[0][0].dtype)


def trunk_layout(valid: torch.Tensor, trunks: torch.Tensor, dtype: torch.dtype) -> TrunkLayout:
    """Each branch row's (group, slot): rows keep their order inside a trunk's block."""
    used, group = torch.unique(trunks, sorted=True, return_inverse=True)
    counts = torch.bincount(group, minlength=len(used))
    slots = int(counts.max())
    first = torch.cumsum(counts, 0) - counts  # rows before each group, in group order
    order = torch.argsort(group, stable=True)
    slot = torch.empty_like(group)
    slot[order] = torch.arange(len(group), device=group.device) - first[group[order]]
    all_used = len(used) == valid.shape[0]
    seen = valid if all_used else valid.index_select(0, used)
    mask = torch.zeros(seen.shape, dtype=dtype, device=seen.device).masked_fill_(~seen, float("-inf"))[:, None, None]
    return TrunkLayout(used, group, slot, slots, mask, all_used)


def _to_blocks(x: torch.Tensor, lay: TrunkLayout) -> torch.Tensor:
    """(B, H, Tb, ...) rows -> (used, H, slots x Tb, ...) blocks, zero in empty slots."""
    b, h, tb = x.shape[:3]
    blocks = x.new_zeros(len(lay.used), h, lay.slots, tb, *x.shape[3:])
    blocks[lay.group, :, lay.slot] = x
    return blocks.view(len(lay.used), h, lay.slots * tb, *x.shape[3:])


def _from_blocks(blocks: torch.Tensor, lay: TrunkLayout, tb: int) -> torch.Tensor:
    """The inverse of `_to_blocks`: (used, H, slots x Tb, ...) -> (B, H, Tb, ...)."""
    u, h = blocks.shape[:2]
    return blocks.view(u, h, lay.slots, tb, *blocks.shape[3:])[lay.group, :, lay.slot]


class _SplitAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, tk, tv, lay: TrunkLayout, scale: float):
        tb = q.shape[2]
        kt = tk if lay.all_used else tk.index_select(0, lay.used)
        vt = tv if lay.all_used else tv.index_select(0, lay.used)
        qt = _to_blocks(q, lay)
        out_t, lse_t = _flash(qt, kt, vt, 0.0, False, attn_mask=lay.mask, scale=scale)
        out_b, lse_b = _flash(q, k, v, 0.0, True, scale=scale)
        out_t, lse_t = _from_blocks(out_t, lay, tb), _from_blocks(lse_t, lay, tb)
        lse = torch.logaddexp(lse_t, lse_b)
        out = (out_t * torch.exp(lse_t - lse)[..., None]).add_(out_b * torch.exp(lse_b - lse)[..., None]).to(q.dtype)
        ctx.save_for_backward(q, k, v, qt, kt, vt, out, lse)
        ctx.lay, ctx.scale, ctx.trunk_shape = lay, scale, tk.shape
        return out

    @staticmethod
    def backward(ctx, grad):
        q, k, v, qt, kt, vt, out, lse = ctx.saved_tensors
        lay, scale, tb = ctx.lay, ctx.scale, q.shape[2]
        grad = grad.contiguous()
        dq, dk, dv = _flash_backward(grad, q, k, v, out, lse, 0.0, True, scale=scale)
        dqt, dkt, dvt = _flash_backward(_to_blocks(grad, lay), qt, kt, vt, _to_blocks(out, lay),
                                        _to_blocks(lse, lay), 0.0, False, attn_mask=lay.mask, scale=scale)
        dq = dq + _from_blocks(dqt, lay, tb)
        if not lay.all_used:
            dkt = dkt.new_zeros(ctx.trunk_shape).index_copy_(0, lay.used, dkt)
            dvt = dvt.new_zeros(ctx.trunk_shape).index_copy_(0, lay.used, dvt)
        return dq, dk, dv, dkt, dvt, None, None


def split_pays(trunk_width: int, branch_width: int) -> bool:
    """Whether a branch pass splits at the trunk: where its trunk columns are at least as many as its branch
    columns. Below that the per-row copies are small and one kernel call over them is faster (the demo's SFT
    batches: 83-token trunks, 231-token branches); see the module docstring."""
    return trunk_width >= branch_width


def split_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, trunks: BranchTrunks,
                    layer: int, scale: float) -> torch.Tensor:
    """Attention of branch rows' `query` (B, H, Tb, hd) over their trunk's columns of layer `layer` and their
    own `key`/`value` (B, KVH, Tb, hd), causal inside the branch; returns (B, H, Tb, hd)."""
    tk, tv = trunks.kv[layer]
    return _SplitAttention.apply(query, key, value, tk, tv, trunks.layout, scale)
