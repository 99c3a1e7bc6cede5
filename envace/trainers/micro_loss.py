"""One micro-batch's policy loss: the packed forward's response log-probs (and entropies) against the
rows' old log-probs and advantages through the configured policy loss, plus the reference-KL and entropy
terms, scaled by the micro-batch's share of its mini-batch (token share for token-mean aggregation, row
share otherwise), with the detached readings the update's per-role metrics add up. Used by
envace.trainers.update for every micro-batch, one at a time or two in thread shards; the arithmetic is the
paper's role-wise GRPO / PPO-clip objective. One knob beyond it: `algo.rehearse_loss_weight` w weighs each
Rehearse token (row) in the loss and in the share's denominator (`role_weight`, `weighted_count`; a
micro-batch holds one role, so its share is w x its tokens over the weighted count); w = 1 is the paper's.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from envace.algos import POLICY_LOSSES, aggregate, kl_penalty
from envace.trainers.config import AlgoConfig
from envace.trainers.packed_readout import packed_logprobs
from envace.trainers.packing import Pack
from envace.trainers.train_rows import TrainRow
from envace.types import Role


@dataclass
class MicroOut:
    """One micro-batch's loss (attached, scaled by its share) and its detached bookkeeping."""

    scaled: torch.Tensor
    loss: float
    share: float
    tokens: int
    role: str
    prompts: set[int]
    lm: dict[str, float]
    entropy: float  # summed over loss tokens
    logprob: float
    kl: float | None


def role_weight(algo: AlgoConfig, role: Role) -> float:
    """A row's weight in the loss and its denominator: `algo.rehearse_loss_weight` for Rehearse, else 1."""
    return algo.rehearse_loss_weight if role is Role.REHEARSE else 1.0


def weighted_count(algo: AlgoConfig, packs: list[Pack]) -> tuple[float, float]:
    """(loss tokens, rows) of `packs`, each weighted by its role's `role_weight`: the mini-batch's denominators."""
    tokens = sum(role_weight(algo, p.role) * p.loss_tokens for p in packs)
    rows = sum(role_weight(algo, p.role) * len(p.segments) for p in packs)
    return tokens, rows


def pad_rows(seqs: list, length: int, dtype: torch.dtype, device) -> torch.Tensor:
    """Ragged per-row values as a zero-padded (rows, length) tensor."""
    out = torch.zeros(len(seqs), length, dtype=dtype, device=device)
    for i, s in enumerate(seqs):
        out[i, : len(s)] = torch.as_tensor(s, dtype=dtype, device=device)
    return out


class MicroBatchLoss:
    """`loss(mb, n_tok, n_rows)`: the micro-batch's MicroOut, for a mini-batch of `n_tok` loss tokens and
    `n_rows` rows, each counted at its role's weight (`weighted_count`). `ref`: each row's reference log-probs
    (KL on), or None."""

    def __init__(self, model, rows: list[TrainRow], algo: AlgoConfig, pad_id: int, max_tokens: int | None,
                 full_logits: bool, ref: dict[int, torch.Tensor] | None) -> None:
        self.model, self.rows, self.algo, self.pad_id = model, rows, algo, pad_id
        self.max_tokens, self.full_logits, self.ref = max_tokens, full_logits, ref
        self.loss_fn = POLICY_LOSSES.get(algo.loss)
        self.device = next(model.parameters()).device

    def __call__(self, mb: list[Pack], n_tok: float, n_rows: float) -> MicroOut:
        algo = self.algo
        out = packed_logprobs(self.model, mb, self.rows, self.pad_id, with_entropy=True, max_tokens=self.max_tokens,
                              entropy_grad=algo.entropy_coef > 0, full_logits=self.full_logits)
        logp, mask, ent = out.logprobs, out.mask.to(out.logprobs.dtype), out.entropy
        rows = [self.rows[r] for r in out.rows]
        old = pad_rows([r.old_logprobs for r in rows], logp.shape[1], logp.dtype, self.device)
        adv = torch.tensor([r.advantage for r in rows], dtype=logp.dtype, device=self.device)
        loss, lm = self.loss_fn(logp, old, adv, mask, clip_low=algo.clip_low, clip_high=algo.clip_high,
                                dual_clip_c=algo.dual_clip_c, agg=algo.agg)
        kl = None
        if self.ref is not None:
            ref_lp = pad_rows([self.ref[r] for r in out.rows], logp.shape[1], logp.dtype, self.device)
            kl = kl_penalty(logp, ref_lp, kind=algo.kl_kind)
            loss = loss + algo.kl_coef * aggregate(kl, mask, algo.agg)
        if algo.entropy_coef > 0:
            loss = loss - algo.entropy_coef * aggregate(ent, mask, algo.agg)
        tokens = int(mask.sum().item())
        weight = role_weight(algo, mb[0].role)  # one role per micro-batch (envace.trainers.packing)
        share = weight * (tokens / n_tok if algo.agg == "token-mean" else len(rows) / n_rows)
        scaled = loss * share
        with torch.no_grad():
            return MicroOut(scaled=scaled, loss=float(loss.item()), share=share, tokens=tokens,
                            role=mb[0].role.value, prompts={r.prompt_index for r in rows}, lm=lm,
                            entropy=float((ent * mask).sum()), logprob=float((logp * mask).sum()),
                            kl=float((kl * mask).sum()) if kl is not None else None)

    def with_loss(self, mb: list[Pack], n_tok: float, n_rows: float) -> tuple[torch.Tensor, MicroOut]:
        """(the scaled loss, the MicroOut): the closure form `ShardRunner.grads` takes."""
        out = self(mb, n_tok, n_rows)
        return out.scaled, out
