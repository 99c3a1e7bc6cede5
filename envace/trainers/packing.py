"""Packing of training rows into sequences, and the log-probs of every packed response.

A trajectory's role calls often extend each other: the prompt of Act call j+1 starts with Act call j's
prompt + response (then the tool result and the next turn follow). Under a causal model the logits at
position t depend only on tokens 0..t, so the log-probs of call j's response read from call j+1's longer
sequence equal those of call j's own sequence. `pack_rows` therefore merges, within one trajectory and
role, rows whose full sequences (prompt + response) are prefixes of one another into a single sequence
(the longest), and keeps one `Segment` per row: where its response sits and at which temperature it was
sampled. One forward over the pack then serves every row in it; the loss is unchanged (the tests check it
against unpacked rows and a per-row loop).

`micro_batches` sorts packs by length so that padding inside a forward stays small, and never mixes roles
in one micro-batch (so the loss function's own metrics of a micro-batch are one role's, and each role's
gradient can be read from the micro-batch gradients for the noise scale).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from envace.engines.base import logprob_temperature
from envace.engines.scoring import token_logprobs
from envace.trainers.rows import TrainRow
from envace.types import Role


@dataclass
class Segment:
    row: int    # index into the update's row list
    start: int  # position of the row's first response token in the packed sequence
    length: int  # response tokens


@dataclass
class Pack:
    ids: list[int]
    role: Role
    segments: list[Segment] = field(default_factory=list)

    @property
    def loss_tokens(self) -> int:
        return sum(s.length for s in self.segments)


def _is_prefix(short: list[int], long: list[int]) -> bool:
    return len(short) <= len(long) and long[:len(short)] == short


def pack_rows(rows: list[TrainRow], *, pack: bool = True) -> list[Pack]:
    """One pack per row (pack=False), or rows of a trajectory and role merged where one's prompt + response
    is a prefix of another's. Rows without response tokens are left out (they carry no loss)."""
    packs: list[Pack] = []
    open_packs: dict[tuple[int, Role], list[Pack]] = {}
    for i, row in enumerate(rows):
        if not row.response_ids:
            continue
        if not row.prompt_ids:
            raise ValueError(f"training row {i} ({row.role.value}) has an empty prompt; the first response "
                             f"token needs at least one prompt token")
        if len(row.old_logprobs) != len(row.response_ids):
            raise ValueError(f"training row {i} ({row.role.value}) has {len(row.response_ids)} response tokens but "
                             f"{len(row.old_logprobs)} old log-probs; the engine must record one per token")
        seq = list(row.prompt_ids) + list(row.response_ids)
        seg = Segment(row=i, start=len(row.prompt_ids), length=len(row.response_ids))
        target = None
        if pack:
            for cand in open_packs.get((row.trajectory_key, row.role), []):
                if _is_prefix(seq, cand.ids):
                    target = cand
                    break
                if _is_prefix(cand.ids, seq):
                    cand.ids = seq
                    target = cand
                    break
        if target is None:
            target = Pack(ids=seq, role=row.role)
            packs.append(target)
            open_packs.setdefault((row.trajectory_key, row.role), []).append(target)
        target.segments.append(seg)
    return packs


def micro_batches(packs: list[Pack], size: int, max_tokens: int | None = None) -> list[list[Pack]]:
    """Packs grouped by role, sorted by length (longest first) and cut into chunks of at most `size`
    sequences and, when `max_tokens` is set, at most `max_tokens` padded tokens (sequences x longest;
    a single longer sequence still gets its own chunk)."""
    out: list[list[Pack]] = []
    for role in sorted({p.role for p in packs}, key=lambda r: r.value):
        cur: list[Pack] = []
        for p in sorted((p for p in packs if p.role == role), key=lambda p: -len(p.ids)):
            # longest first: the chunk's padded width is its first sequence's length
            if cur and (len(cur) >= size or (max_tokens is not None and (len(cur) + 1) * len(cur[0].ids) > max_tokens)):
                out.append(cur)
                cur = []
            cur.append(p)
        if cur:
            out.append(cur)
    return out


@dataclass
class PackedLogprobs:
    """Per-row tensors of one micro-batch, rows in `rows` order (the order of their segments)."""

    rows: list[int]
    logprobs: torch.Tensor       # (R, L), 0 where mask is 0
    mask: torch.Tensor           # (R, L) float32
    entropy: torch.Tensor | None  # (R, L) or None


def packed_logprobs(model, packs: list[Pack], rows: list[TrainRow], pad_id: int, *, with_entropy: bool = False,
                    entropy_grad: bool = True, full_logits: bool = False) -> PackedLogprobs:
    """One forward over `packs` (right-padded), every segment's response log-probs at its row's temperature."""
    device = next(model.parameters()).device
    total = max(len(p.ids) for p in packs)
    ids = torch.full((len(packs), total), int(pad_id), dtype=torch.long)
    order: list[int] = []
    seq_idx: list[int] = []
    pos_idx: list[int] = []
    targets: list[int] = []
    temps: list[float] = []
    slot: list[int] = []
    cols: list[int] = []
    for p_i, pack in enumerate(packs):
        ids[p_i, :len(pack.ids)] = torch.tensor(pack.ids, dtype=torch.long)
        for seg in pack.segments:
            r = len(order)
            order.append(seg.row)
            n = seg.length
            seq_idx += [p_i] * n
            pos_idx += range(seg.start - 1, seg.start - 1 + n)  # logits at t predict token t + 1
            targets += pack.ids[seg.start:seg.start + n]
            temps += [logprob_temperature(rows[seg.row].temperature)] * n
            slot += [r] * n
            cols += range(n)
    resp_len = max(s.length for p in packs for s in p.segments)
    lp, ent = token_logprobs(model, ids.to(device), torch.tensor(seq_idx, device=device),
                             torch.tensor(pos_idx, device=device), torch.tensor(targets, device=device),
                             torch.tensor(temps, device=device), with_entropy=with_entropy,
                             entropy_grad=entropy_grad, full_logits=full_logits)
    where = (torch.tensor(slot, device=device), torch.tensor(cols, device=device))
    shape = (len(order), resp_len)
    mask = torch.zeros(shape, dtype=torch.float32, device=device)
    mask[where] = 1.0
    logprobs = torch.zeros(shape, dtype=lp.dtype, device=device).index_put(where, lp)
    entropy = None if ent is None else torch.zeros(shape, dtype=ent.dtype, device=device).index_put(where, ent)
    return PackedLogprobs(rows=order, logprobs=logprobs, mask=mask, entropy=entropy)
