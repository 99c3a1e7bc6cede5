"""One policy update: micro-batched forward/backward over training rows, then ONE optimizer step.

Log-probs are recomputed at the temperature each row was sampled with (the engine records them at the
same temperature, so the PPO ratio starts at 1 on-policy). Token-mean aggregation is global over the
whole step's rows, not per micro-batch: each micro-batch's mean is rescaled by its share of the step's
tokens, so the result does not depend on the micro-batch size.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import torch

from envace.algos import aggregate, kl_penalty, POLICY_LOSSES
from envace.engines.scoring import response_logprobs
from envace.trainers.config import AlgoConfig
from envace.trainers.rows import TrainRow
from envace.types import Role


@dataclass
class UpdateResult:
    loss: float
    grad_norm: float
    role_metrics: dict[str, dict[str, float]]


def _pad(seqs: list[list[float]], length: int) -> torch.Tensor:
    out = torch.zeros(len(seqs), length)
    for i, s in enumerate(seqs):
        out[i, : len(s)] = torch.tensor(s, dtype=torch.float32)
    return out


def _share(mb: list[TrainRow], rows: list[TrainRow], agg: str, mb_tokens: int, total_tokens: int) -> float:
    return mb_tokens / max(total_tokens, 1) if agg == "token-mean" else len(mb) / max(len(rows), 1)


def policy_update(model: torch.nn.Module, optimizer: torch.optim.Optimizer, rows: list[TrainRow],
                  algo: AlgoConfig, *, pad_id: int, micro_batch: int, grad_clip: float,
                  ref_model: torch.nn.Module | None = None) -> UpdateResult:
    """Accumulate gradients over micro-batches of `rows` and take one optimizer step."""
    device = next(model.parameters()).device
    loss_fn = POLICY_LOSSES.get(algo.loss)
    total_tokens = sum(len(r.response_ids) for r in rows)
    sums: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    model.train()
    optimizer.zero_grad(set_to_none=True)
    total_loss = 0.0
    for start in range(0, len(rows), micro_batch):
        mb = rows[start:start + micro_batch]
        logp, mask, ent = response_logprobs(model, [r.prompt_ids for r in mb], [r.response_ids for r in mb],
                                            [r.temperature for r in mb], pad_id, with_entropy=True)
        mask = mask.to(device).float()
        old = _pad([r.old_logprobs for r in mb], logp.shape[1]).to(device)
        adv = torch.tensor([r.advantage for r in mb], dtype=torch.float32, device=device)
        loss, _ = loss_fn(logp, old, adv, mask, clip_low=algo.clip_low, clip_high=algo.clip_high,
                          dual_clip_c=algo.dual_clip_c, agg=algo.agg)
        kl = None
        if algo.use_kl and ref_model is not None:
            with torch.no_grad():
                ref_logp, _, _ = response_logprobs(ref_model, [r.prompt_ids for r in mb],
                                                   [r.response_ids for r in mb], [r.temperature for r in mb], pad_id)
            kl = kl_penalty(logp, ref_logp.to(device), kind=algo.kl_kind)
            loss = loss + algo.kl_coef * aggregate(kl, mask, algo.agg)
        if algo.entropy_coef > 0 and ent is not None:
            loss = loss - algo.entropy_coef * aggregate(ent, mask, algo.agg)
        share = _share(mb, rows, algo.agg, int(mask.sum().item()), total_tokens)
        (loss * share).backward()
        total_loss += float(loss.item()) * share
        _accumulate_role_metrics(sums, mb, logp.detach(), old, adv, mask, ent, kl, algo)
    grad_norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip))
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return UpdateResult(loss=total_loss, grad_norm=grad_norm, role_metrics=_finish(sums))


def _accumulate_role_metrics(sums, mb, logp, old, adv, mask, ent, kl, algo) -> None:
    ratio = torch.exp(logp - old)
    a = adv[:, None].expand_as(ratio)
    clipped = ((a > 0) & (ratio > 1 + algo.clip_high)) | ((a < 0) & (ratio < 1 - algo.clip_low))
    for i, row in enumerate(mb):
        m = mask[i].bool()
        n = int(m.sum().item())
        s = sums[row.role.value]
        s["tokens"] += n
        s["clipped"] += float(clipped[i][m].sum().item())
        s["logprob_sum"] += float(logp[i][m].sum().item())
        if ent is not None:
            s["entropy_sum"] += float(ent[i].detach()[m].sum().item())
        if kl is not None:
            s["kl_sum"] += float(kl[i].detach()[m].sum().item())


def _finish(sums) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for role, s in sums.items():
        n = max(s["tokens"], 1.0)
        out[role] = {"tokens": s["tokens"], "clip_frac": s["clipped"] / n, "logprob_mean": s["logprob_sum"] / n,
                     "entropy": s.get("entropy_sum", 0.0) / n}
        if "kl_sum" in s:
            out[role]["kl"] = s["kl_sum"] / n
    return out


def role_rows(rows: list[TrainRow], role: Role) -> list[TrainRow]:
    return [r for r in rows if r.role == role]
