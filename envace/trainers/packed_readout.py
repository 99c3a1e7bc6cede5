"""The log-probs of every packed response: one forward over a micro-batch of packs (envace.trainers.packing),
each segment's response read at its row's temperature and scattered back to per-row tensors. Prefix packs run
their trunks and then their branches (envace.trainers.prefix_passes); chain, tree and one-row packs run as one
right-padded forward, tree packs under their ancestor mask (`tree_mask_kind` says how the model takes it).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from envace.engines.base import logprob_temperature
from envace.engines.logprobs import token_logprobs
from envace.models.attention import NAME as NATIVE_GQA_SDPA
from envace.trainers.packing import Pack
from envace.trainers.prefix_passes import prefix_pass
from envace.trainers.train_rows import TrainRow


def tree_mask_kind(model) -> str | None:
    """How an explicit 4D mask is passed to `model`: "bool" (sdpa and envace.models.attention's `envace_sdpa`),
    "additive" (eager), or None when the attention implementation cannot take one (then use chain packing)."""
    impl = getattr(getattr(model, "config", None), "_attn_implementation", None)
    return {"sdpa": "bool", NATIVE_GQA_SDPA: "bool", "eager": "additive"}.get(impl)


def _tree_inputs(packs: list[Pack], total: int, dtype: torch.dtype, kind: str | None):
    """Position ids (P, T) and the 4D mask (P, 1, T, T) of a micro-batch holding tree packs."""
    if kind is None:
        raise ValueError("tree packing needs a model with sdpa or eager attention; use algo.pack=chain")
    pos = torch.zeros((len(packs), total), dtype=torch.long)
    ends = torch.zeros((len(packs), total), dtype=torch.long)
    for i, p in enumerate(packs):
        n = len(p.ids)
        pos[i, :n] = torch.tensor(p.positions if p.positions is not None else range(n))
        ends[i, :n] = torch.tensor(p.ends if p.ends is not None else [n] * n)
        ends[i, n:] = torch.arange(n, total) + 1  # padding sees itself only (no empty softmax rows)
    q = torch.arange(total)[:, None]
    k = torch.arange(total)[None, :]
    allowed = (k <= q)[None] & (q[None] < ends[:, None, :])  # k is an ancestor-or-self of q
    pad = torch.arange(total)[None, :] >= torch.tensor([len(p.ids) for p in packs])[:, None]
    allowed = torch.where(pad[:, :, None], torch.eye(total, dtype=torch.bool)[None], allowed)
    if kind == "bool":
        return pos, allowed[:, None]
    mask = torch.zeros(allowed.shape, dtype=dtype).masked_fill(~allowed, torch.finfo(dtype).min)
    return pos, mask[:, None]


@dataclass
class PackedLogprobs:
    """Per-row tensors of one micro-batch, rows in `rows` order (the order of their segments)."""

    rows: list[int]
    logprobs: torch.Tensor       # (R, L), 0 where mask is 0
    mask: torch.Tensor           # (R, L) float32
    entropy: torch.Tensor | None  # (R, L) or None


def _scatter_rows(order: list[int], slot: list[int], cols: list[int], lp: torch.Tensor, ent: torch.Tensor | None,
                  resp_len: int) -> PackedLogprobs:
    device = lp.device
    where = (torch.tensor(slot, device=device), torch.tensor(cols, device=device))
    shape = (len(order), resp_len)
    mask = torch.zeros(shape, dtype=torch.float32, device=device)
    mask[where] = 1.0
    logprobs = torch.zeros(shape, dtype=lp.dtype, device=device).index_put(where, lp)
    entropy = None if ent is None else torch.zeros(shape, dtype=ent.dtype, device=device).index_put(where, ent)
    return PackedLogprobs(rows=order, logprobs=logprobs, mask=mask, entropy=entropy)


def _targets(packs: list[Pack], rows: list[TrainRow]):
    """Per read token: (segment slot, column, target id, temperature); and the segments' row order."""
    order: list[int] = []
    slot: list[int] = []
    cols: list[int] = []
    targets: list[int] = []
    temps: list[float] = []
    for pack in packs:
        for seg in pack.segments:
            r = len(order)
            order.append(seg.row)
            n = seg.length
            targets += rows[seg.row].response_ids
            temps += [logprob_temperature(rows[seg.row].temperature)] * n
            slot += [r] * n
            cols += range(n)
    return order, slot, cols, targets, temps


def packed_logprobs(model, packs: list[Pack], rows: list[TrainRow], pad_id: int, *, with_entropy: bool = False,
                    entropy_grad: bool = True, full_logits: bool = False,
                    max_tokens: int | None = None) -> PackedLogprobs:
    """One forward over `packs` (right-padded), every segment's response log-probs at its row's temperature.
    Prefix packs (all or none of a micro-batch) run their trunks and then their branches in passes of at
    most `max_tokens` padded tokens."""
    kw = dict(with_entropy=with_entropy, entropy_grad=entropy_grad, full_logits=full_logits)
    if any(p.branches is not None for p in packs):
        if not all(p.branches is not None for p in packs):
            raise ValueError("a micro-batch mixes prefix packs with other packs; pack its rows in one mode")
        order, slot, cols, targets, temps = _targets(packs, rows)
        lp, ent = prefix_pass(model, packs, targets, temps, pad_id, max_tokens, **kw)
        return _scatter_rows(order, slot, cols, lp, ent, max(s.length for p in packs for s in p.segments))
    device = next(model.parameters()).device
    total = max(len(p.ids) for p in packs)
    ids = torch.full((len(packs), total), int(pad_id), dtype=torch.long)
    seq_idx: list[int] = []
    pos_idx: list[int] = []
    for p_i, pack in enumerate(packs):
        ids[p_i, :len(pack.ids)] = torch.tensor(pack.ids, dtype=torch.long)
        for seg in pack.segments:
            seq_idx += [p_i] * seg.length
            pos_idx += seg.read
    order, slot, cols, targets, temps = _targets(packs, rows)
    extra = {}
    if any(p.ends is not None for p in packs):
        dtype = next(model.parameters()).dtype
        pos, mask4 = _tree_inputs(packs, total, dtype, tree_mask_kind(model))
        extra = {"position_ids": pos.to(device), "attention_mask": mask4.to(device)}
    lp, ent = token_logprobs(model, ids.to(device), torch.tensor(seq_idx, device=device),
                             torch.tensor(pos_idx, device=device), torch.tensor(targets, device=device),
                             torch.tensor(temps, device=device), **kw, **extra)
    return _scatter_rows(order, slot, cols, lp, ent, max(s.length for p in packs for s in p.segments))
