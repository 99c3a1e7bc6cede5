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
- branch part: each row's queries against its own keys, causal (right padding sits after every real token);
- out = w_t out_t + w_b out_b with w = exp(lse_part - lse), lse = logaddexp(lse_t, lse_b).

The backward calls torch's CPU flash-attention backward once per part with the merged output and
log-sum-exp: that kernel computes P = exp(S - lse) and D = rowsum(dO * O) from what it is given, so with the
merged pair each part's dQ, dK and dV are exactly the whole softmax's (the standard split used by ring and
blockwise attention). Outputs and gradients match the one-mask pass to float rounding
(tests/models/test_trunk_attention.py, float64).

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


def _own_scores(q: torch.Tensor, k: torch.Tensor, scale: float) -> torch.Tensor:
    """Causal scores of each row's queries against its own keys: (B x KVH, group x Tb, Tb), a query head's
    group side by side (heads h of one key head are h // group), -inf above the diagonal."""
    b, h, tb, hd = q.shape
    kvh = k.shape[1]
    above = torch.ones(tb, tb, dtype=torch.bool, device=q.device).triu_(1)
    bias = torch.zeros(tb, tb, dtype=q.dtype, device=q.device).masked_fill_(above, float("-inf"))
    return torch.baddbmm(bias.repeat(h // kvh, 1)[None], q.reshape(b * kvh, h // kvh * tb, hd),
                         k.reshape(b * kvh, tb, hd).transpose(1, 2), alpha=scale)


class _SplitAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, tk, tv, lay: TrunkLayout, scale: float):
        b, h, tb, hd = q.shape
        kvh = k.shape[1]
        kt = tk if lay.all_used else tk.index_select(0, lay.used)
        vt = tv if lay.all_used else tv.index_select(0, lay.used)
        qt = _to_blocks(q, lay)
        out_t, lse_t = _flash(qt, kt, vt, 0.0, False, attn_mask=lay.mask, scale=scale)
        out_t, lse_t = _from_blocks(out_t, lay, tb), _from_blocks(lse_t, lay, tb)  # lse in the kernel's accumulate type
        # the branch's own columns: small per-row blocks, cheaper as batched matmuls than as kernel tiles
        scores = _own_scores(q, k, scale)
        # softmax, not exp(scores - lse): torch's exp takes a slow path on underflowing inputs (the -inf above
        # the diagonal), its softmax does not; the row's log-sum-exp is its max - log(probability at the max)
        top, at = scores.max(dim=-1, keepdim=True)
        probs = torch.softmax(scores, dim=-1)
        lse_b = (top - probs.gather(-1, at).log()).to(lse_t.dtype).view(b, h, tb)
        lse = torch.logaddexp(lse_t, lse_b)
        probs.mul_(torch.exp(lse_b - lse).reshape(b * kvh, -1, 1).to(probs.dtype))  # under the whole softmax
        out = torch.bmm(probs, v.reshape(b * kvh, tb, hd)).view(b, h, tb, hd)
        out = out.add_(out_t * torch.exp(lse_t - lse)[..., None].to(q.dtype))
        ctx.save_for_backward(q, k, v, qt, kt, vt, out, lse, probs)
        ctx.lay, ctx.scale, ctx.trunk_shape = lay, scale, tk.shape
        return out

    @staticmethod
    def backward(ctx, grad):
        q, k, v, qt, kt, vt, out, lse, probs = ctx.saved_tensors
        lay, scale = ctx.lay, ctx.scale
        b, h, tb, hd = q.shape
        kvh = k.shape[1]
        grad = grad.contiguous()
        dqt, dkt, dvt = _flash_backward(_to_blocks(grad, lay), qt, kt, vt, _to_blocks(out, lay),
                                        _to_blocks(lse, lay), 0.0, False, attn_mask=lay.mask, scale=scale)
        # the own-column part by hand: dS = P (dP - rowsum(dO O)), with P under the merged log-sum-exp
        g = grad.view(b * kvh, -1, hd)
        dot = (grad * out).sum(-1).reshape(b * kvh, -1, 1)
        ds = torch.bmm(g, v.reshape(b * kvh, tb, hd).transpose(1, 2)).sub_(dot).mul_(probs).mul_(scale)
        dq = torch.bmm(ds, k.reshape(b * kvh, tb, hd)).view(b, h, tb, hd).add_(_from_blocks(dqt, lay, tb))
        dk = torch.bmm(ds.transpose(1, 2), q.reshape(b * kvh, -1, hd)).view(b, kvh, tb, hd)
        dv = torch.bmm(probs.transpose(1, 2), g).view(b, kvh, tb, hd)
        if not lay.all_used:
            dkt = dkt.new_zeros(ctx.trunk_shape).index_copy_(0, lay.used, dkt)
            dvt = dvt.new_zeros(ctx.trunk_shape).index_copy_(0, lay.used, dvt)
        return dq, dk, dv, dkt, dvt, None, None


def split_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, trunks: BranchTrunks,
                    layer: int, scale: float) -> torch.Tensor:
    """Attention of branch rows' `query` (B, H, Tb, hd) over their trunk's columns of layer `layer` and their
    own `key`/`value` (B, KVH, Tb, hd), causal inside the branch; returns (B, H, Tb, hd)."""
    tk, tv = trunks.kv[layer]
    return _SplitAttention.apply(query, key, value, tk, tv, trunks.layout, scale)
