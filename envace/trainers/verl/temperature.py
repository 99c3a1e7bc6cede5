"""Role temperatures on verl 0.9.1: every row's log-probs (old, reference, and the actor's during the
update) are computed at the temperature that row was sampled with.

verl's V1 trainer hands its workers one scalar, `batch.extra_info["temperature"] =
rollout.temperature`, for the whole batch. EnvACE samples Act at 1.0 and Rehearse at 0.01 (paper), so a
scalar is wrong for one of the roles. verl's FSDP engine already computes per-sample temperatures when
the micro-batch carries a `temperature` tensor of shape (bsz,) instead of a scalar (its
`prepare_model_inputs` expands it over each row's tokens); the worker reads the rows from
TransferQueue and then writes `extra_info` over them. So envace's trainer:
1. reads each row's sampling temperature from `extra_fields["temperature"]` (the agent loop records it
   through `envace.engines.base.logprob_temperature`, so a greedy call is recorded at 1.0, as the
   embedded trainer does);
2. if the batch holds one temperature, passes it as the scalar (verl's own path, fused kernels allowed);
   otherwise writes the per-row tensor into TransferQueue under `temperature` and removes the scalar
   from `extra_info` on the way to the worker (`RowTemperatureGroup`), so the worker's micro-batches
   carry the tensor.
One batch, one forward per micro-batch and one optimizer step, instead of a split by temperature (a
split update would take one optimizer step per temperature).

fp32 division: verl's FSDP engine divides the bf16 logits by the temperature cast to bf16
(`_scale_logits_by_temperature`), so at T = 0.01 the bf16 rounding of each logit (up to 2^-8 relative)
grows x100 and non-argmax log-probs move by whole nats against vLLM's fp32 sampling log-probs. Importing
this module (the plugin does, in every verl process) replaces that function with `scale_logits_fp32`:
logits cast to fp32 before the division, the log-softmax / entropy after it in fp32. T = 1 as a scalar
keeps verl's no-copy path; any other temperature costs one fp32 copy of the micro-batch's logits, which
the log-prob token cap bounds (launcher: `log_prob_max_token_len_per_gpu`).

Departure from verl: verl's fused-kernel path (`model.use_fused_kernels`) accepts only a scalar, so a
batch of mixed temperatures is refused there with an error naming the switch.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from envace.engines.base import logprob_temperature
from envace.trainers.verl.deps import require
from envace.trainers.verl.logits import scale_logits_fp32

TEMPERATURE_FIELD = "temperature"  # the TransferQueue field / micro-batch key verl's engines read
EXTRA_KEY = "temperature"  # where the agent loop records a row's sampling temperature (extra_fields)


def row_temperatures(extra_fields: Sequence[dict[str, Any] | None], default: float) -> torch.Tensor:
    """(bs,) float32 log-prob temperature of each row: its recorded sampling temperature, else `default`
    (verl's rollout.temperature; rows of another agent loop record none)."""
    temps = []
    for extra in extra_fields:
        value = (extra or {}).get(EXTRA_KEY)
        temps.append(float(default) if value is None else logprob_temperature(float(value)))
    return torch.tensor(temps, dtype=torch.float32)


def uniform_temperature(temps: torch.Tensor) -> float | None:
    """The batch's single temperature, or None when rows differ."""
    if temps.numel() == 0 or bool((temps == temps[0]).all()):
        return float(temps[0]) if temps.numel() else None
    return None


class RowTemperatureGroup:
    """A verl worker group whose log-prob / update calls carry per-row temperatures.

    `uniform` not None: the batch's one temperature replaces verl's scalar. None: the scalar is removed,
    so the worker uses the `temperature` rows already written to TransferQueue. Every other attribute
    (dispatch info, checkpoints, profiling) is the wrapped group's.
    """

    def __init__(self, group: Any, uniform: float | None) -> None:
        self._group = group
        self._uniform = uniform

    def __getattr__(self, name: str) -> Any:
        return getattr(self._group, name)

    def _apply(self, batch: Any) -> Any:
        if self._uniform is None:
            batch.extra_info.pop(TEMPERATURE_FIELD, None)
        else:
            batch.extra_info[TEMPERATURE_FIELD] = self._uniform
        return batch

    def compute_log_prob(self, batch: Any) -> Any:
        return self._group.compute_log_prob(self._apply(batch))

    def compute_ref_log_prob(self, batch: Any) -> Any:
        return self._group.compute_ref_log_prob(self._apply(batch))

    def update_actor(self, batch: Any) -> Any:
        return self._group.update_actor(self._apply(batch))


def install_fp32_division() -> None:
    """Replace verl's FSDP-engine temperature division by `scale_logits_fp32` (idempotent)."""
    engine = require("verl.workers.engine.fsdp.transformer_impl")
    engine._scale_logits_by_temperature = scale_logits_fp32


install_fp32_division()
