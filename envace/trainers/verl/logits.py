"""Log-prob arithmetic of verl's FSDP engine with the temperature division in fp32, importable without
verl (the GPU evidence script runs it on machines where verl is not installed).

- `scale_logits_fp32`: what envace installs as verl's `_scale_logits_by_temperature` (temperature.py):
  logits cast to fp32, then divided; T = 1 as a scalar returns the logits untouched, as verl does.
- `logprobs_from_logits`, `entropy_from_logits`: verl 0.9.1's formulas (`verl.utils.torch_functional`:
  log-softmax gathered at the labels; logsumexp minus the softmax-weighted logits), written out so the
  probe measures verl's memory shape; a CPU test checks them against verl's own functions.
"""

from __future__ import annotations

from typing import Any

import torch


def scale_logits_fp32(logits: torch.Tensor, temperature: Any, *, is_unit_temperature: bool) -> torch.Tensor:
    """verl's `_scale_logits_by_temperature` with the division in fp32."""
    if is_unit_temperature:
        return logits
    temperature = torch.as_tensor(temperature, device=logits.device)
    return logits.float() / temperature.float().clamp(min=1e-8)


def logprobs_from_logits(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """(N, V) logits, (N,) labels -> (N,) log-probs of the labels."""
    return torch.log_softmax(logits, dim=-1).gather(-1, labels.unsqueeze(-1)).squeeze(-1)


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """(N, V) logits -> (N,) entropy of the softmax."""
    pd = torch.softmax(logits, dim=-1)
    return torch.logsumexp(logits, dim=-1) - (pd * logits).sum(dim=-1)
