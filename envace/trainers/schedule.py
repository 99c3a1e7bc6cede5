"""Learning-rate schedule of the RL phase: linear warm-up over `optim.warmup_steps` RL steps, then the
constant `optim.lr` (the paper's GRPO runs use a constant lr; verl's `lr_warmup_steps` warms up the same
way). The lr is a pure function of the RL step, set on every optimizer before the step's update, so a
resumed run continues on exactly the curve of an uninterrupted one without a scheduler state to restore
(the lr of a checkpoint's step is still recorded in its meta.json for readers).

Counted in RL steps, not optimizer steps: with several PPO mini-batches per step, every optimizer step
of one RL step uses that step's lr.
"""

from __future__ import annotations

import torch

from envace.trainers.config import OptimConfig


def lr_at(step: int, optim: OptimConfig) -> float:
    """lr of RL step `step` (1-based): lr * step / warmup_steps during warm-up, then lr."""
    if step < 1:
        raise ValueError(f"RL steps are 1-based; got step={step}")
    if optim.warmup_steps <= 0 or step >= optim.warmup_steps:
        return optim.lr
    return optim.lr * step / optim.warmup_steps


def set_lr(optimizers: dict[str, torch.optim.Optimizer], lr: float) -> None:
    for opt in optimizers.values():
        for group in opt.param_groups:
            group["lr"] = lr
