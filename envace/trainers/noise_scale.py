"""The gradient noise scale B_simple = tr(Sigma) / |G|^2 (McCandlish et al. 2018, "An Empirical Model of
Large-Batch Training"), estimated from one optimizer step by a split-half of its prompts.

The step's prompts (GRPO groups: a prompt's K trajectories and all their rows) are split at random into
two halves A and B of n_A and n_B prompts, and each half's gradient g_A, g_B is taken on its own (the
update runs half A's micro-batches, then half B's, so this costs one gradient copy per micro-batch and
no extra forward). Prompts are drawn independently, so g_A and g_B are independent estimates of G and
    |G|^2     ~ g_A . g_B                                  (E = |G|^2)
    tr(Sigma) ~ |g_A - g_B|^2 / (1/n_A + 1/n_B)             (E = tr Sigma, per prompt)
Departure from the paper's small-batch / big-batch pair (appendix A.1): that pair needs the small batches
to be random samples of the big one; envace's micro-batches are one role each and sorted by length, so
their means differ systematically and the pair came out negative at every step while the policy
measurably learned. The split-half pair needs only that prompts are independent. The unit of B_simple is
the prompt (a group of K trajectories), so it compares directly with `prompts_per_step`. With token-mean
aggregation a half's gradient is its token-weighted share rescaled (a ratio estimator: unbiased to first
order). One step's estimate is noisy and can be negative; estimates of several steps are combined as the
paper advises (average |G|^2 and tr Sigma separately, then divide), never clipped.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class NoiseEstimate:
    g2: float      # |G|^2 estimate
    trace: float   # tr(Sigma) estimate, per prompt


def split_half(g_a: torch.Tensor, g_b: torch.Tensor, n_a: int, n_b: int) -> NoiseEstimate | None:
    """(|G|^2, tr Sigma) from the mean gradients of two independent halves of n_a and n_b prompts; None
    when a half is empty."""
    if n_a < 1 or n_b < 1:
        return None
    a, b = g_a.double(), g_b.double()
    return NoiseEstimate(g2=float(a @ b), trace=float((a - b).square().sum()) / (1.0 / n_a + 1.0 / n_b))


@dataclass
class NoiseAccumulator:
    """Estimates of several optimizer steps, combined as mean(tr Sigma) / mean(|G|^2)."""

    estimates: list[NoiseEstimate] = field(default_factory=list)

    def add(self, est: NoiseEstimate | None) -> None:
        if est is not None:
            self.estimates.append(est)

    def summary(self) -> dict[str, float]:
        if not self.estimates:
            return {}
        g2 = sum(e.g2 for e in self.estimates) / len(self.estimates)
        trace = sum(e.trace for e in self.estimates) / len(self.estimates)
        out = {"grad_sq_norm_est": g2, "grad_trace_sigma_est": trace}
        if g2 != 0:
            out["grad_noise_scale"] = trace / g2
        return out
