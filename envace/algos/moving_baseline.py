"""Per-role moving-average baseline: A_row = R_row - b_role, b_role an exponential moving average of the
role's mean reward over earlier training steps.

Unlike GRPO's baselines (envace.algos.advantages), which come from the K trajectories of one prompt, this
one is a single number per role carried across steps: with decay d, after a step whose role mean is m,
b <- d * b + (1 - d) * m. The step's advantages use b from *before* the step's own rewards are folded in;
a role seen for the first time (the run's first step, or a role with no scored rows until now) uses the
step's own batch mean instead, and that mean starts its average. The mean over a step follows the same
`weighting` as GRPO's (`per_output`: every scored row once; `per_trajectory`: each trajectory once, at the
mean of its scored rows of the role). `norm_std` divides by the sample std of those same members in the
step's batch (1 with fewer than 2), not by a moving std. Unscored rows (NaN) are in no mean and get 0.

Pure parts: `role_batch_means`, `ema_update` and the registered estimator `role_moving_average` (same
signature as the other estimators; `baseline` carries the previous steps' values, None = a first step).
State: `RoleMovingBaseline`, the holder a trainer keeps across steps and writes into its checkpoints.

Departure from a per-agent moving-average baseline as usually written: the average is per role of one
shared policy (Act, Rehearse), not per agent model, and it is initialised from the first batch mean rather
than from 0, so the first step's advantages are centred.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from envace.algos.advantages import (
    ADVANTAGES,
    Weighting,
    _as_rewards,
    _check_options,
    _encode_ids,
    _encode_roles,
    _group_mean_std,
    _members,
)
from envace.types import Role

ROLES: tuple[str, ...] = tuple(role.value for role in Role)  # role code i <-> ROLES[i] (as in advantages.py)
DEFAULT_DECAY = 0.9


def _check_decay(decay: float) -> float:
    if isinstance(decay, bool) or not isinstance(decay, (int, float)) or not 0 <= decay < 1:
        raise ValueError(f"decay={decay!r} must be a number in [0, 1) (weight of the earlier steps' average); "
                         "e.g. decay=0.9")
    return float(decay)


def _check_baseline(baseline: Mapping[str, float] | None, what: str = "baseline") -> dict[str, float]:
    out: dict[str, float] = {}
    for role, value in (baseline or {}).items():
        key = role.value if isinstance(role, Role) else role
        if key not in ROLES:
            raise ValueError(f"{what} has key {role!r}, not a role; use one of: {', '.join(ROLES)}")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ValueError(f"{what}[{key!r}]={value!r} is not a finite number; a carried baseline is a role's "
                             "average reward")
        out[key] = float(value)
    return out


def _role_members(rewards: Any, prompt_ids: Any, trajectory_ids: Any, roles: Any, weighting: str):
    """(r0 (N,), scored (N,), role code (N,), member mean (R,), member std (R,), member count (R,), device)."""
    _check_options(weighting, 0.0)
    r_in = _as_rewards(rewards)
    n = r_in.shape[0]
    prompt = _encode_ids(prompt_ids, "prompt_ids", n)
    traj = _encode_ids(trajectory_ids, "trajectory_ids", n)
    role = _encode_roles(roles, n)
    r = r_in.detach().cpu().to(torch.float64)
    scored = ~torch.isnan(r)
    r0 = torch.where(scored, r, torch.zeros_like(r))
    n_roles = len(ROLES)
    if n == 0:
        zeros = torch.zeros(n_roles, dtype=torch.float64)
        return r0, scored, role, zeros, torch.ones_like(zeros), zeros, r_in.device
    # a trajectory id is unique within its prompt only: the member key is (prompt, trajectory)
    traj_in_batch = prompt * (int(traj.max()) + 1) + traj
    value, valid, member_role = _members(r0, scored, role, traj_in_batch, weighting)
    mean, std = _group_mean_std(value, valid, member_role, n_roles)
    count = torch.zeros(n_roles, dtype=torch.float64).index_add_(0, member_role, valid.to(torch.float64))
    return r0, scored, role, mean, std, count, r_in.device


def role_batch_means(
    rewards: torch.Tensor | Sequence[float],
    prompt_ids: Sequence[Any] | torch.Tensor | np.ndarray,
    trajectory_ids: Sequence[Any] | torch.Tensor | np.ndarray,
    roles: Sequence[Role | str],
    *,
    weighting: Weighting = "per_output",
) -> dict[str, float]:
    """The step's mean reward per role ({role value: mean}), over scored members only; a role with no scored
    row is absent. Arguments as `role_moving_average_advantages`."""
    _, _, _, mean, _, count, _ = _role_members(rewards, prompt_ids, trajectory_ids, roles, weighting)
    return {ROLES[i]: float(mean[i]) for i in range(len(ROLES)) if count[i] > 0}


def ema_update(previous: Mapping[str, float] | None, means: Mapping[str, float], decay: float) -> dict[str, float]:
    """b <- decay * b + (1 - decay) * mean for every role in `means`; a role without a previous value starts at
    its mean; a role absent from `means` keeps its value."""
    decay = _check_decay(decay)
    out = _check_baseline(previous, "previous")
    for role, m in _check_baseline(means, "means").items():
        out[role] = decay * out[role] + (1 - decay) * m if role in out else m
    return out


@ADVANTAGES.register("role_moving_average")
def role_moving_average_advantages(
    rewards: torch.Tensor | Sequence[float],
    prompt_ids: Sequence[Any] | torch.Tensor | np.ndarray,
    trajectory_ids: Sequence[Any] | torch.Tensor | np.ndarray,
    roles: Sequence[Role | str],
    *,
    weighting: Weighting = "per_output",
    norm_std: bool = False,
    eps: float = 1e-6,
    baseline: Mapping[str, float] | None = None,
) -> torch.Tensor:
    """Per-role moving-average advantages: A = R - b_role, one per training row.

    Args:
        rewards, prompt_ids, trajectory_ids, roles: (N,) as `role_grpo_advantages` (NaN marks an unscored row).
        weighting: how a role's batch mean counts rows, used for a role without a carried baseline.
        norm_std: divide by the sample std of the role's members in this batch + eps (off by default).
        eps: added to the std before dividing.
        baseline: {role value: b} carried from earlier steps (`RoleMovingBaseline.values`); a role missing
            from it (or None: the first step) uses this batch's mean.

    Returns:
        (N,) float32 advantages on rewards' device; 0 for unscored rows.
    """
    _check_options(weighting, eps)
    carried = _check_baseline(baseline)
    r0, scored, role, mean, std, _, device = _role_members(rewards, prompt_ids, trajectory_ids, roles, weighting)
    if r0.shape[0] == 0:
        return torch.zeros(0, dtype=torch.float32, device=device)
    b = torch.tensor([carried.get(name, float(mean[i])) for i, name in enumerate(ROLES)], dtype=torch.float64)
    adv = r0 - b[role]
    if norm_std:
        adv = adv / (std[role] + eps)
    adv = torch.where(scored, adv, torch.zeros_like(adv))
    return adv.to(device=device, dtype=torch.float32)


# Read by trainers: this estimator wants `baseline` carried across steps (a RoleMovingBaseline).
role_moving_average_advantages.carries_baseline = True  # type: ignore[attr-defined]


def carries_baseline(estimator: Any) -> bool:
    """Whether the advantage function `estimator` reads a baseline carried across steps."""
    return bool(getattr(estimator, "carries_baseline", False))


class RoleMovingBaseline:
    """The per-role moving average a trainer carries across steps (and saves with its checkpoints).

    `advantages(...)` computes the step's advantages with the baseline of the earlier steps, then folds the
    step's role means in; `used` holds the baseline each role's rows got in that call.
    """

    def __init__(self, decay: float = DEFAULT_DECAY, values: Mapping[str, float] | None = None) -> None:
        self.decay = _check_decay(decay)
        self.values: dict[str, float] = _check_baseline(values, "values")
        self.used: dict[str, float] = {}

    def advantages(self, fn: Any, rewards: Any, prompt_ids: Any, trajectory_ids: Any, roles: Any, *,
                   weighting: Weighting = "per_output", norm_std: bool = False, eps: float = 1e-6) -> torch.Tensor:
        """(N,) advantages from the estimator `fn` with `baseline=self.values`; then the average moves."""
        adv = fn(rewards, prompt_ids, trajectory_ids, roles, weighting=weighting, norm_std=norm_std, eps=eps,
                 baseline=dict(self.values))
        means = role_batch_means(rewards, prompt_ids, trajectory_ids, roles, weighting=weighting)
        self.used = {role: self.values.get(role, m) for role, m in means.items()}
        self.values = ema_update(self.values, means, self.decay)
        return adv

    def metrics(self) -> dict[str, float]:
        """`baseline/<role>`: the baseline the last step's rows of that role were measured against."""
        return {f"baseline/{role}": b for role, b in self.used.items()}

    def state_dict(self) -> dict[str, Any]:
        return {"decay": self.decay, "values": dict(self.values)}

    def load_state_dict(self, state: Mapping[str, Any], source: str = "state") -> None:
        """Restore the carried values (the decay stays this holder's: the run's config sets it)."""
        if not isinstance(state, Mapping) or not isinstance(state.get("values"), Mapping):
            raise ValueError(f"{source}: a role baseline state is {{'decay': d, 'values': {{role: b}}}}, got "
                             f"{state!r}")
        self.values = _check_baseline(state["values"], f"{source} values")
