"""Per-token KL estimators between the policy and a frozen reference, and token entropy from logits.

Both inputs are log-probs (B, L) of the *sampled* tokens, so these are single-sample Monte-Carlo estimates
of KL(pi || pi_ref) (Schulman, "Approximating KL divergence", 2020):
    "kl"         k1 = logp - ref                       unbiased, high variance, can be negative
    "abs"        |logp - ref|
    "mse"        k2 = 1/2 (logp - ref)^2               biased, low variance
    "low_var_kl" k3 = exp(ref - logp) - (ref - logp) - 1   unbiased, always >= 0
EnvACE uses low_var_kl with coefficient 1e-4 in the paper (off in the reference script). As is standard
(verl does the same), k3 is clamped to [-10, 10] so one token with a huge log-ratio cannot dominate.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from envace.registry import Registry

KLFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
KL_ESTIMATORS: Registry[KLFn] = Registry("KL estimator")

_K3_CLAMP = 10.0


@KL_ESTIMATORS.register("kl")
def _k1(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    return logprobs - ref_logprobs


@KL_ESTIMATORS.register("abs")
def _abs(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    return (logprobs - ref_logprobs).abs()


@KL_ESTIMATORS.register("mse")
def _k2(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    return 0.5 * (logprobs - ref_logprobs).square()


@KL_ESTIMATORS.register("low_var_kl")
def _k3(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    log_ratio = ref_logprobs - logprobs
    return (torch.exp(log_ratio) - log_ratio - 1).clamp(-_K3_CLAMP, _K3_CLAMP)


def kl_penalty(logprobs: torch.Tensor, ref_logprobs: torch.Tensor, kind: str = "low_var_kl") -> torch.Tensor:
    """Per-token KL estimate (B, L) from policy log-probs (B, L) and reference log-probs (B, L).

    `kind` is one of KL_ESTIMATORS.names(): "kl", "abs", "mse", "low_var_kl". Reduce the result with
    `envace.algos.aggregate` and the response mask.
    """
    fn = KL_ESTIMATORS.get(kind)
    if logprobs.shape != ref_logprobs.shape:
        raise ValueError(
            f"logprobs {tuple(logprobs.shape)} and ref_logprobs {tuple(ref_logprobs.shape)} must have the same shape"
        )
    return fn(logprobs, ref_logprobs.detach())


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of the softmax over the last axis: logits (B, L, V) -> (B, L), in nats.

    H = logsumexp(z) - sum(softmax(z) * z), which stays finite for large logits; logits of -inf (tokens
    masked out of the vocabulary) contribute 0.
    """
    if logits.dim() < 1:
        raise ValueError("logits must have a vocabulary axis, e.g. shape (B, L, V)")
    probs = torch.softmax(logits, dim=-1)
    weighted = torch.where(probs > 0, probs * logits, torch.zeros_like(logits))  # 0 * -inf would be NaN
    return torch.logsumexp(logits, dim=-1) - weighted.sum(-1)
