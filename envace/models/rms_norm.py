"""RMSNorm for CPU training: transformers' forward op for op, with a backward written out by hand.

transformers' RMSNorm (Qwen3, Qwen2, Llama: y = w * x / sqrt(mean(x^2) + eps)) leaves its backward to
autograd, which walks the forward's six ops back one by one: `pow`'s backward alone is three passes over x
(x^1, times 2, times the gradient), and `mean`'s expands its gradient to x's shape. A model of 128-wide rows
spends more time in these small passes than in its matmuls' share would suggest: the norms of the demo's
two-layer model (four per layer: input, after attention, q and k per head; one at the end) took about 13 %
of an SFT step's forward and backward.

`RMSNormFunction` computes the same forward (`pow(2).mean(-1)`, `rsqrt`, two products, in transformers'
order, so the outputs are equal bit for bit) and the closed-form backward with x̂ = x * rstd:

    dL/dw = sum over rows of g * x̂
    dL/dx = rstd * (g w - x̂ * mean(g w * x̂))

in five passes over x-sized tensors. The gradients agree with autograd's to float rounding
(tests/models/test_rms_norm.py: float64 gradcheck, and float32 against transformers' module). On the
demo's SFT work the step took 3-5 % less time (one thread, alternated with the plain norms).

`use_fused_rms_norm(model)` swaps every norm module of a known class for `FusedRMSNorm`, which holds the
same `weight` Parameter under the same name, so state dicts, saved checkpoints and anything reading
`...norm.weight` see no change. SFT swaps them (`SFTConfig.fused_norm`, default on); RL keeps
transformers' modules. Only float32 models on CPU are switched (one cast to another dtype afterwards runs
transformers' ops again); other classes (Gemma's (1 + w) norm, for one) are left as they are. Not in the
paper: an execution choice of the embedded CPU backend, as `envace.models.attention` is.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

STANDARD_RMS_NORMS = frozenset({"Qwen3RMSNorm", "Qwen2RMSNorm", "LlamaRMSNorm", "MistralRMSNorm"})


class RMSNormFunction(torch.autograd.Function):
    """y = w * (x * rsqrt(mean(x^2, -1) + eps)) over the last dim of float32 x; see the module docstring."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        rstd = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
        normed = x * rstd
        ctx.save_for_backward(normed, rstd, weight)
        return weight * normed

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, torch.Tensor | None, None]:
        normed, rstd, weight = ctx.saved_tensors
        width = normed.shape[-1]
        grad_w = (grad * normed).reshape(-1, width).sum(0) if ctx.needs_input_grad[1] else None
        if not ctx.needs_input_grad[0]:
            return None, grad_w, None
        grad_normed = grad * weight
        dot = torch.linalg.vecdot(grad_normed, normed).unsqueeze(-1).div_(width)
        return grad_normed.addcmul_(normed, dot, value=-1).mul_(rstd), grad_w, None


class FusedRMSNorm(nn.Module):
    """An RMSNorm module over an existing `weight` Parameter; forward equal bit for bit to transformers'."""

    def __init__(self, weight: nn.Parameter, eps: float) -> None:
        super().__init__()
        self.weight = weight
        self.variance_epsilon = eps

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        float32 = hidden_states.dtype == self.weight.dtype == torch.float32
        if float32 and torch.is_grad_enabled() and (hidden_states.requires_grad or self.weight.requires_grad):
            return RMSNormFunction.apply(hidden_states, self.weight, self.variance_epsilon)
        # no gradient, or a model cast to another dtype after the swap: transformers' ops (the norm in float32)
        normed = hidden_states.to(torch.float32)
        normed = normed * torch.rsqrt(normed.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)
        return self.weight * normed.to(hidden_states.dtype)

    def extra_repr(self) -> str:
        return f"{tuple(self.weight.shape)}, eps={self.variance_epsilon}"


def use_fused_rms_norm(model: nn.Module) -> int:
    """Swap the standard RMSNorm modules of a float32 CPU `model` for `FusedRMSNorm` (same weights); returns
    how many were swapped (0 for other models)."""
    params = list(model.parameters())
    if not params or params[0].device.type != "cpu" or any(p.dtype != torch.float32 for p in params):
        return 0
    swaps = [(name, module) for name, module in model.named_modules()
             if type(module).__name__ in STANDARD_RMS_NORMS and isinstance(getattr(module, "weight", None),
                                                                           nn.Parameter)]
    for name, module in swaps:
        parent_name, _, attr = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, attr, FusedRMSNorm(module.weight, float(module.variance_epsilon)))
    return len(swaps)
