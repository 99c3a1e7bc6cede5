"""The gradient noise scale B_simple = tr(Sigma) / |G|^2 (McCandlish et al. 2018, "An Empirical Model of
Large-Batch Training", appendix A.1), estimated from the micro-batch gradients of one optimizer step.

A gradient estimated from b samples has E|g_b|^2 = |G|^2 + tr(Sigma)/b. The paper's unbiased pair, from a
small batch b and a big batch B:
    |G|^2     ~ (B |g_B|^2 - b |g_b|^2) / (B - b)
    tr(Sigma) ~ (|g_b|^2 - |g_B|^2) / (1/b - 1/B)
Here the small batches are the micro-batches (sizes b_i, gradient norms |g_i|^2) and the big batch is their
union (size B, the step's gradient). Departure: micro-batches differ in size, so the small-batch term uses
the mean of |g_i|^2 and the mean of 1/b_i (E mean_i |g_i|^2 = |G|^2 + tr(Sigma) mean_i(1/b_i)), which reduces
to the paper's pair when all b_i are equal. Estimates from several optimizer steps are combined as the
paper advises: average |G|^2 and tr(Sigma) separately, then divide. The unit of b is the training row
(one role call); rows of one trajectory are correlated, so B_simple counts effective rows, and with
token-mean the step's gradient weighs micro-batches by loss tokens rather than rows (a second-order
difference when micro-batches have similar tokens per row). A single estimate is noisy and can be
negative; that is reported as is, not clipped.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class NoiseEstimate:
    g2: float      # |G|^2 estimate
    trace: float   # tr(Sigma) estimate


def estimate(small_sq_norms: list[float], small_sizes: list[float], big_sq_norm: float,
             big_size: float) -> NoiseEstimate | None:
    """One step's (|G|^2, tr Sigma) from micro-batch squared norms and sizes; None with < 2 micro-batches."""
    if len(small_sq_norms) < 2 or len(small_sq_norms) != len(small_sizes):
        return None
    inv_small = sum(1.0 / b for b in small_sizes) / len(small_sizes)
    inv_big = 1.0 / big_size
    if inv_small - inv_big <= 0:
        return None
    mean_small = sum(small_sq_norms) / len(small_sq_norms)
    trace = (mean_small - big_sq_norm) / (inv_small - inv_big)
    return NoiseEstimate(g2=big_sq_norm - trace * inv_big, trace=trace)


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
