"""Policy-gradient losses (PPO-clip with dual clip, vanilla PG) and loss aggregation over tokens.

Shapes: B rows (one per role call), L response tokens; `mask` (B, L) is 1 on the row's loss tokens;
advantages are (B,) (broadcast over tokens) or (B, L). PPO-clip with dual clip (Ye et al. 2020, the form
verl uses), per token with rho = exp(logp - old_logp):
    clipped = max(-A*rho, -A*clip(rho, 1-clip_low, 1+clip_high))
    loss    = min(clipped, c*|A|)  if A < 0   else clipped
Departures: the log-ratio is clamped to [-20, 20] before exp (an overflow guard; such tokens are clipped
anyway), and the sequence-level aggregations skip rows without loss tokens instead of counting them as 0.
Every policy loss has `ppo_clip_loss`'s signature and returns (loss, metrics) with the same metric keys.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from envace.registry import Registry

AggFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
AGGREGATIONS: Registry[AggFn] = Registry("loss aggregation mode")

PolicyLossFn = Callable[..., tuple[torch.Tensor, dict[str, float]]]
POLICY_LOSSES: Registry[PolicyLossFn] = Registry("policy loss")

_LOG_RATIO_CLAMP = 20.0


def _masked(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    # where, not multiply: padding positions may hold inf/NaN (e.g. -inf log-probs) and 0*inf is NaN.
    return torch.where(mask > 0, values, torch.zeros_like(values)) * mask


@AGGREGATIONS.register("token-mean")
def _token_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    # Every loss token of the batch weighs the same: long rows count more (EnvACE's and DAPO's choice).
    return _masked(values, mask).sum() / mask.sum().clamp(min=1)


@AGGREGATIONS.register("seq-mean-token-mean")
def _seq_mean_token_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    tokens = mask.sum(-1)
    per_row = _masked(values, mask).sum(-1) / tokens.clamp(min=1)
    has = (tokens > 0).to(values.dtype)
    return (per_row * has).sum() / has.sum().clamp(min=1)


@AGGREGATIONS.register("seq-mean-token-sum")
def _seq_mean_token_sum(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    tokens = mask.sum(-1)
    per_row = _masked(values, mask).sum(-1)
    has = (tokens > 0).to(values.dtype)
    return (per_row * has).sum() / has.sum().clamp(min=1)


def aggregate(values: torch.Tensor, mask: torch.Tensor, mode: str = "token-mean") -> torch.Tensor:
    """Reduce per-token values (B, L) to a scalar over the tokens where mask (B, L) is set.

    Modes:
        "token-mean": sum over all unmasked tokens / their count.
        "seq-mean-token-mean": mean over tokens within each row, then mean over rows.
        "seq-mean-token-sum": sum over tokens within each row, then mean over rows.
    Rows without any unmasked token are left out of the row means; an all-masked batch gives 0.
    """
    if values.shape != mask.shape or values.dim() != 2:
        raise ValueError(
            "aggregate needs values and mask of the same (B, L) shape, "
            f"got {tuple(values.shape)} and {tuple(mask.shape)}"
        )
    return AGGREGATIONS.get(mode)(values, mask.to(values.dtype))


def _check_inputs(
    logprobs: torch.Tensor, old_logprobs: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor
) -> torch.Tensor:
    """Validate shapes; return advantages as (B, L)."""
    if logprobs.dim() != 2:
        raise ValueError(f"logprobs must be (B, L), got shape {tuple(logprobs.shape)}")
    for name, t in (("old_logprobs", old_logprobs), ("mask", mask)):
        if t.shape != logprobs.shape:
            raise ValueError(
                f"{name} has shape {tuple(t.shape)} but logprobs has {tuple(logprobs.shape)}; they must match"
            )
    b = logprobs.shape[0]
    if advantages.shape == (b,):
        return advantages.unsqueeze(-1).expand_as(logprobs)
    if advantages.shape == logprobs.shape:
        return advantages
    raise ValueError(
        f"advantages must be ({b},) (one per row) or {tuple(logprobs.shape)} (per token), got {tuple(advantages.shape)}"
    )


def _check_clip(clip_low: float, clip_high: float, dual_clip_c: float) -> None:
    if not 0 <= clip_low < 1:
        raise ValueError(f"clip_low={clip_low!r} must be in [0, 1) (ratio is clipped at 1 - clip_low); e.g. 0.2")
    if not clip_high >= 0:
        raise ValueError(f"clip_high={clip_high!r} must be >= 0 (ratio is clipped at 1 + clip_high); e.g. 0.2")
    if not dual_clip_c > 1:
        raise ValueError(
            f"dual_clip_c={dual_clip_c!r} must be > 1 (the dual-clip bound c*|A| has to lie above the PPO clip "
            f"at ratio 1); set dual_clip_c=3.0, or math.inf to turn dual clip off"
        )


def _masked_mean(x: torch.Tensor, mask: torch.Tensor) -> float:
    return float(_masked(x, mask).sum() / mask.sum().clamp(min=1))


@POLICY_LOSSES.register("ppo_clip")
def ppo_clip_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    dual_clip_c: float = 3.0,
    agg: str = "token-mean",
) -> tuple[torch.Tensor, dict[str, float]]:
    """PPO-clip policy loss with dual clip.

    Args:
        logprobs: (B, L) log-probs of the sampled tokens under the current policy (carries the gradient).
        old_logprobs: (B, L) log-probs under the policy that sampled them (no gradient is taken).
        advantages: (B,) per row or (B, L) per token.
        mask: (B, L) 1 on loss tokens, 0 elsewhere.
        clip_low, clip_high: the ratio is clipped to [1 - clip_low, 1 + clip_high].
        dual_clip_c: for A < 0 the per-token loss is capped at c*|A|; must be > 1 (math.inf disables).
        agg: aggregation mode, see `aggregate`.

    Returns:
        (scalar loss, metrics) with metrics "clip_frac" (share of loss tokens where the PPO clip is active),
        "dual_clip_frac" (share where the dual-clip cap is active), "approx_kl" (mean of old - new
        log-prob), "ratio_mean" (mean ratio), all over the mask.
    """
    _check_clip(clip_low, clip_high, dual_clip_c)
    adv = _check_inputs(logprobs, old_logprobs, advantages, mask).detach().to(logprobs.dtype)
    m = mask.to(logprobs.dtype)
    # Padding may hold -inf/NaN log-probs; zero its log-ratio so no NaN reaches the backward pass.
    log_ratio = torch.where(m > 0, logprobs - old_logprobs.detach(), torch.zeros_like(logprobs))
    ratio = torch.exp(log_ratio.clamp(-_LOG_RATIO_CLAMP, _LOG_RATIO_CLAMP))
    unclipped = -adv * ratio
    clipped = -adv * ratio.clamp(1 - clip_low, 1 + clip_high)
    ppo = torch.maximum(unclipped, clipped)
    cap = -adv * dual_clip_c if math.isfinite(dual_clip_c) else torch.full_like(adv, math.inf)
    per_token = torch.where(adv < 0, torch.minimum(ppo, cap), ppo)
    loss = aggregate(per_token, m, agg)
    with torch.no_grad():
        metrics = {
            "clip_frac": _masked_mean((clipped > unclipped).to(m.dtype), m),
            "dual_clip_frac": _masked_mean(((adv < 0) & (ppo > cap)).to(m.dtype), m),
            "approx_kl": _masked_mean(old_logprobs - logprobs, m),
            "ratio_mean": _masked_mean(ratio, m),
        }
    return loss, metrics


@POLICY_LOSSES.register("vanilla_pg")
def vanilla_pg_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    dual_clip_c: float = 3.0,
    agg: str = "token-mean",
) -> tuple[torch.Tensor, dict[str, float]]:
    """REINFORCE-style loss -A * logp per token (B, L), aggregated by `agg`; for comparison with PPO-clip.

    Same signature as `ppo_clip_loss` so it is a drop-in; the clip arguments are accepted and ignored.
    The metrics have the same keys (clip fractions are always 0).
    """
    adv = _check_inputs(logprobs, old_logprobs, advantages, mask).detach().to(logprobs.dtype)
    m = mask.to(logprobs.dtype)
    loss = aggregate(-adv * logprobs, m, agg)
    with torch.no_grad():
        ratio = torch.exp((logprobs - old_logprobs).clamp(-_LOG_RATIO_CLAMP, _LOG_RATIO_CLAMP))
        metrics = {
            "clip_frac": 0.0,
            "dual_clip_frac": 0.0,
            "approx_kl": _masked_mean(old_logprobs - logprobs, m),
            "ratio_mean": _masked_mean(ratio, m),
        }
    return loss, metrics
