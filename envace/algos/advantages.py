"""Outcome advantages for role-wise GRPO (EnvACE) and plain GRPO, as pure tensor functions.

One entry per training row (one Act or one Rehearse generation), each carrying its trajectory's reward.
Role-wise GRPO groups rows by (prompt, role): A_row = R_row - mu_{x,r} (optionally / (std_{x,r} + eps));
plain GRPO (`grpo`) groups by prompt only. The baseline weighting is `per_output` (mean over the group's
rows, the reference code's default) or `per_trajectory` (each trajectory once); with `norm_std` the
sample std is over the same members.

Departures from the reference / verl:
- a group whose scored rows all come from one trajectory gets advantage 0 (verl's GRPO gives a 1-row
  group its raw reward);
- unscored rows (reward NaN) are left out of mu and std and get advantage 0 (TRL's rule);
- rows are never duplicated before the baseline (the reference pads its batch with duplicates first).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

import numpy as np
import torch

from envace.registry import Registry
from envace.types import Role

Weighting = Literal["per_output", "per_trajectory"]
WEIGHTINGS: tuple[str, ...] = ("per_output", "per_trajectory")

# Every advantage function has this signature:
# (rewards, prompt_ids, trajectory_ids, roles, *, weighting, norm_std, eps, baseline) -> Tensor (N,) float32
# `baseline` ({role value: b} carried across steps) is read only by estimators with `carries_baseline`
# (envace.algos.moving_baseline); GRPO's baseline is the group's own mean, so these ignore it.
AdvantageFn = Callable[..., torch.Tensor]
ADVANTAGES: Registry[AdvantageFn] = Registry("advantage estimator")

# A Role is a str subclass, so this one dict maps both Role.ACT and "act" to the same code.
_ROLE_CODE: dict[Any, int] = {role.value: i for i, role in enumerate(Role)}


def _as_rewards(rewards: Any) -> torch.Tensor:
    r = rewards if isinstance(rewards, torch.Tensor) else torch.as_tensor(np.asarray(rewards, dtype=np.float64))
    if r.dim() != 1:
        raise ValueError(f"rewards must be 1-D (one reward per training row), got shape {tuple(r.shape)}")
    if not r.is_floating_point():
        r = r.to(torch.float64)
    bad = torch.isinf(r)
    if bool(bad.any()):
        i = int(bad.nonzero()[0])
        raise ValueError(f"rewards[{i}]={float(r[i])} is not finite; use NaN to mark an unscored row")
    return r


def _encode_ids(ids: Any, field: str, n: int) -> torch.Tensor:
    """Integer codes (N,) for a sequence of hashable ids; equal ids get equal codes."""
    if isinstance(ids, torch.Tensor):
        if ids.dim() != 1 or ids.shape[0] != n:
            raise ValueError(f"{field} must have shape ({n},) to match rewards, got {tuple(ids.shape)}")
        if ids.is_floating_point() or ids.is_complex():
            raise ValueError(f"{field} must hold integer (or str) ids, got a {ids.dtype} tensor; cast with .long()")
        return torch.unique(ids.detach().cpu(), return_inverse=True)[1]
    if isinstance(ids, np.ndarray) and ids.dtype.kind in "iubUS":
        if ids.ndim != 1 or ids.shape[0] != n:
            raise ValueError(f"{field} must have shape ({n},) to match rewards, got {ids.shape}")
        return torch.from_numpy(np.unique(ids, return_inverse=True)[1].reshape(-1).astype(np.int64))
    seq = ids.tolist() if isinstance(ids, np.ndarray) else list(ids)
    if len(seq) != n:
        raise ValueError(f"{field} has {len(seq)} entries but rewards has {n}; give one id per training row")
    codes: dict[Any, int] = {}
    try:
        out = [codes.setdefault(k, len(codes)) for k in seq]
    except TypeError:
        i = next(j for j, k in enumerate(seq) if not _hashable(k))
        raise ValueError(f"{field}[{i}]={seq[i]!r} is not hashable; use int or str ids") from None
    return torch.tensor(out, dtype=torch.long)


def _hashable(x: Any) -> bool:
    try:
        hash(x)
    except TypeError:
        return False
    return True


def _encode_roles(roles: Any, n: int) -> torch.Tensor:
    seq = roles.tolist() if isinstance(roles, np.ndarray) else list(roles)
    if len(seq) != n:
        raise ValueError(f"roles has {len(seq)} entries but rewards has {n}; give one role per training row")
    try:
        return torch.tensor([_ROLE_CODE[r] for r in seq], dtype=torch.long)
    except (KeyError, TypeError):
        i = next(j for j, r in enumerate(seq) if not _hashable(r) or r not in _ROLE_CODE)
        valid = ", ".join(role.value for role in Role)
        raise ValueError(f"roles[{i}]={seq[i]!r} is not a role; use an envace.types.Role or one of: {valid}") from None


def _check_options(weighting: str, eps: float) -> None:
    if weighting not in WEIGHTINGS:
        raise ValueError(f"weighting={weighting!r} is not supported; use one of {', '.join(WEIGHTINGS)}")
    if not (eps >= 0 and math.isfinite(eps)):
        raise ValueError(f"eps={eps!r} must be a finite number >= 0 (it guards the std division); e.g. eps=1e-6")


def _members(
    r0: torch.Tensor, scored: torch.Tensor, group: torch.Tensor, traj: torch.Tensor, weighting: str
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The baseline's members: (value (M,), valid (M,), group of each member (M,)).

    per_output: one member per row. per_trajectory: one member per (group, trajectory), valued at the mean
    of that trajectory's scored rows in the group, valid if it has any.
    """
    if weighting == "per_output":
        return r0, scored, group
    sub_key = group * (int(traj.max()) + 1) + traj
    _, sub = torch.unique(sub_key, return_inverse=True)
    m = int(sub.max()) + 1
    total = torch.zeros(m, dtype=r0.dtype).index_add_(0, sub, r0)
    count = torch.zeros(m, dtype=r0.dtype).index_add_(0, sub, scored.to(r0.dtype))
    valid = count > 0
    value = torch.where(valid, total / count.clamp(min=1), torch.zeros_like(total))
    member_group = torch.zeros(m, dtype=torch.long).scatter_(0, sub, group)
    return value, valid, member_group


def _group_mean_std(
    value: torch.Tensor, valid: torch.Tensor, member_group: torch.Tensor, n_groups: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean and sample std per group over valid members, shapes (G,). std = 1 where < 2 valid members."""
    w = valid.to(value.dtype)
    count = torch.zeros(n_groups, dtype=value.dtype).index_add_(0, member_group, w)
    total = torch.zeros(n_groups, dtype=value.dtype).index_add_(0, member_group, value * w)
    mean = total / count.clamp(min=1)
    dev2 = (value - mean[member_group]) ** 2 * w
    ss = torch.zeros(n_groups, dtype=value.dtype).index_add_(0, member_group, dev2)
    var = torch.where(count >= 2, ss / (count - 1).clamp(min=1), torch.ones_like(ss))
    return mean, var.sqrt()


def _grouped_advantages(
    rewards: Any,
    prompt_ids: Any,
    trajectory_ids: Any,
    roles: Any,
    *,
    by_role: bool,
    weighting: str,
    norm_std: bool,
    eps: float,
) -> torch.Tensor:
    _check_options(weighting, eps)
    r_in = _as_rewards(rewards)
    n = r_in.shape[0]
    prompt = _encode_ids(prompt_ids, "prompt_ids", n)
    traj = _encode_ids(trajectory_ids, "trajectory_ids", n)
    role = _encode_roles(roles, n)
    if n == 0:
        return torch.zeros(0, dtype=torch.float32, device=r_in.device)

    r = r_in.detach().cpu().to(torch.float64)  # float64 so the baseline is exact to float32 output
    scored = ~torch.isnan(r)
    r0 = torch.where(scored, r, torch.zeros_like(r))
    key = prompt * len(_ROLE_CODE) + role if by_role else prompt
    _, group = torch.unique(key, return_inverse=True)
    n_groups = int(group.max()) + 1

    value, valid, member_group = _members(r0, scored, group, traj, weighting)
    mean, std = _group_mean_std(value, valid, member_group, n_groups)
    adv = r0 - mean[group]
    if norm_std:
        adv = adv / (std[group] + eps)
    adv = torch.where(scored, adv, torch.zeros_like(adv))
    return adv.to(device=r_in.device, dtype=torch.float32)


@ADVANTAGES.register("role_grpo")
def role_grpo_advantages(
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
    """Role-wise GRPO advantages: A = R - mu_{prompt, role}, one per training row.

    Args:
        rewards: (N,) float, the reward of each row's trajectory; NaN marks an unscored row.
        prompt_ids: (N,) hashable ids (int or str) of each row's prompt (verl's `uid`).
        trajectory_ids: (N,) hashable ids of each row's trajectory, unique within a prompt.
        roles: (N,) `Role` (or its string value) of the call that produced the row.
        weighting: "per_output" (mean over rows) or "per_trajectory" (each trajectory once).
        norm_std: divide by the group's sample std + eps (rows for per_output, trajectories for
            per_trajectory). Off by default, as in EnvACE.
        eps: added to the std before dividing.
        baseline: unused (a baseline carried across steps is for `role_moving_average`); accepted so every
            estimator has one signature.

    Returns:
        (N,) float32 advantages, on rewards' device; 0 for unscored rows and for groups without contrast.
    """
    return _grouped_advantages(
        rewards, prompt_ids, trajectory_ids, roles, by_role=True, weighting=weighting, norm_std=norm_std, eps=eps
    )


@ADVANTAGES.register("grpo")
def grpo_advantages(
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
    """Plain GRPO advantages: A = R - mu_{prompt}, rows of all roles in one group per prompt.

    Same arguments and return as `role_grpo_advantages`; `roles` is validated but does not affect grouping.
    """
    return _grouped_advantages(
        rewards, prompt_ids, trajectory_ids, roles, by_role=False, weighting=weighting, norm_std=norm_std, eps=eps
    )


def get_advantage_fn(name: str) -> AdvantageFn:
    """The advantage function registered as `name` ("role_grpo", "grpo", "role_moving_average"); unknown names
    list the valid ones."""
    return ADVANTAGES.get(name)
