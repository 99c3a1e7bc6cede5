"""Role-wise GRPO advantages on verl's data structures, computed by envace's one implementation
(`envace.algos.role_grpo_advantages`): A = R - mu_{prompt uid, role}, no std by default, written on
every response token of the row.

Two entry points:
- `apply_role_advantages(data, batch_keys, extra_fields, tags)`: what envace's V1 trainer
  (`trainer_mode=envace`) calls. Roles come from each row's `extra_fields["role"]` (set by the
  envace agent loop), trajectories from verl's row keys `{uid}_{session}_{index}`, so both weightings
  (per output, per trajectory) work; verl's padding rows and unscored episodes are left out of the
  baselines and get advantage 0.
- the estimator `envace_role_grpo`, registered with verl's `register_adv_est` for verl's generic
  path (`compute_advantage` hands an estimator only `token_level_rewards`, `response_mask`, `index`
  and `config`). Roles are visible there only when the `index` (uid) is role-qualified,
  `"<uid>#role=<role>"` (`role_qualified_uid`); a plain uid groups all rows of a prompt together,
  i.e. plain GRPO with A = R - mu. Trade-offs of that path: no trajectory ids (so per-output weighting
  only), no way to mark unscored rows, and verl's V1 agent-loop adapter stores the dataset uid, so
  something upstream (a custom dataset or trainer) must write the qualified uid. Use the envace
  trainer unless you need verl's stock trainer.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from envace.algos import role_grpo_advantages
from envace.trainers.verl.deps import require
from envace.types import Role

ESTIMATOR = "envace_role_grpo"
ROLE_SEP = "#role="


def role_qualified_uid(uid: str, role: Role | str) -> str:
    return f"{uid}{ROLE_SEP}{Role(role).value}"


def split_role_uid(index: Any) -> tuple[str, str]:
    """(uid, role) of a possibly role-qualified uid; an unqualified uid gets role "act" (one group)."""
    text = str(index)
    uid, sep, role = text.partition(ROLE_SEP)
    return (uid, role) if sep else (text, Role.ACT.value)


def token_role_advantages(token_level_rewards: torch.Tensor, response_mask: torch.Tensor, uids: Sequence[Any],
                          trajectory_ids: Sequence[Any], roles: Sequence[Role | str], *,
                          scored: Sequence[bool] | None = None, weighting: str = "per_output",
                          norm_std: bool = False, eps: float = 1e-6) -> tuple[torch.Tensor, torch.Tensor]:
    """Token-level role-wise GRPO advantages.

    Args:
        token_level_rewards: (bs, L) rewards; a row's R is their sum (verl puts the episode reward on
            the last response token).
        response_mask: (bs, L) 1 on generated tokens.
        uids, trajectory_ids, roles: (bs,) prompt uid, trajectory id (unique within a uid), role.
        scored: (bs,) False marks a row left out of the baselines (advantage 0); default all True.

    Returns:
        (advantages, returns), both (bs, L) = A_row * response_mask, in the rewards' dtype.
    """
    if token_level_rewards.shape != response_mask.shape:
        raise ValueError(f"token_level_rewards {tuple(token_level_rewards.shape)} and response_mask "
                         f"{tuple(response_mask.shape)} must have the same (bs, L) shape")
    scores = token_level_rewards.detach().sum(dim=-1).to(torch.float64)
    if scored is not None:
        keep = torch.as_tensor(np.asarray(scored, dtype=bool))
        if keep.shape[0] != scores.shape[0]:
            raise ValueError(f"scored has {keep.shape[0]} entries for {scores.shape[0]} rows")
        scores = torch.where(keep, scores, torch.full_like(scores, float("nan")))
    adv = role_grpo_advantages(scores, list(uids), list(trajectory_ids), list(roles), weighting=weighting,
                               norm_std=norm_std, eps=eps)
    out = adv.to(device=token_level_rewards.device, dtype=token_level_rewards.dtype).unsqueeze(-1)
    out = out * response_mask.to(token_level_rewards.dtype)
    return out, out.clone()


def row_key_parts(key: str) -> tuple[str, str, int]:
    """(uid, session id, output index) of a V1 row key `{uid}_{session}_{index}`."""
    parts = str(key).rsplit("_", 2)
    if len(parts) != 3 or not parts[2].lstrip("-").isdigit():
        raise ValueError(f"row key {key!r} is not verl V1's '{{uid}}_{{session}}_{{index}}'; the envace trainer "
                         "reads rows written by verl's TransferQueue agent-loop adapter")
    return parts[0], parts[1], int(parts[2])


def apply_role_advantages(data: Any, batch_keys: Sequence[str], extra_fields: Sequence[Any],
                          tags: Sequence[dict] | None = None, *, weighting: str = "per_output",
                          norm_std: bool = False) -> dict[str, float]:
    """Write role-wise `advantages` / `returns` into `data.batch` (a verl DataProto with
    `token_level_rewards`, `response_mask`, and `non_tensor_batch["uid"]`). Returns per-role metrics."""
    n = len(batch_keys)
    uids = [str(u) for u in data.non_tensor_batch["uid"]]
    if len(uids) != n or len(extra_fields) != n:
        raise ValueError(f"{n} row keys but {len(uids)} uids and {len(extra_fields)} extra_fields")
    tags = list(tags) if tags is not None else [{}] * n
    roles, trajs, scored = [], [], []
    for key, _uid, extra, tag in zip(batch_keys, uids, extra_fields, tags):
        key_uid, session, _ = row_key_parts(key)
        padding = bool((tag or {}).get("is_padding", False))
        extra = getattr(extra, "data", extra)  # a tensordict NonTensorData wrapper holds the dict
        extra = extra if isinstance(extra, dict) else {}
        role = extra.get("role")
        if role is None and not padding:
            raise ValueError(f"row {key!r} has no extra_fields['role']; role-wise advantages need rows from the "
                             "envace_agent loop (or set algorithm.adv_estimator=grpo)")
        roles.append(Role(role or Role.ACT.value))
        trajs.append(f"{key_uid}_{session}")
        scored.append(not padding and bool(extra.get("envace_scored", True)))
    adv, ret = token_role_advantages(data.batch["token_level_rewards"], data.batch["response_mask"], uids, trajs,
                                     roles, scored=scored, weighting=weighting, norm_std=norm_std)
    data.batch["advantages"], data.batch["returns"] = adv, ret
    return role_metrics(adv, data.batch["response_mask"], roles, scored)


def role_metrics(adv: torch.Tensor, mask: torch.Tensor, roles: Sequence[Role],
                 scored: Sequence[bool]) -> dict[str, float]:
    per_row = adv.sum(-1) / mask.sum(-1).clamp(min=1)
    out: dict[str, float] = {}
    for role in (Role.ACT, Role.REHEARSE):
        idx = [i for i, (r, s) in enumerate(zip(roles, scored)) if r is role and s]
        out[f"envace/rows/{role.value}"] = float(len(idx))
        if idx:
            vals = per_row[idx]
            out[f"envace/advantage/{role.value}/mean"] = float(vals.mean())
            out[f"envace/advantage/{role.value}/abs_mean"] = float(vals.abs().mean())
    out["envace/rows/unscored"] = float(sum(not s for s in scored))
    return out


def _register() -> Any:
    core_algos = require("verl.trainer.ppo.core_algos")

    @core_algos.register_adv_est(ESTIMATOR)
    def compute_envace_role_grpo_advantage(token_level_rewards: torch.Tensor, response_mask: torch.Tensor,
                                           index: np.ndarray | None = None, config: Any = None,
                                           epsilon: float = 1e-6, **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """verl estimator: role-wise GRPO when `index` holds role-qualified uids (see module docstring)."""
        if index is None:
            raise ValueError(f"{ESTIMATOR} needs the rows' uid (verl passes non_tensor_batch['uid'] as index)")
        parts = [split_role_uid(i) for i in index]
        norm = bool(config.get("norm_adv_by_std_in_grpo", False)) if config is not None else False
        return token_role_advantages(token_level_rewards, response_mask, [u for u, _ in parts],
                                     list(range(len(parts))), [r for _, r in parts], norm_std=norm, eps=epsilon)

    return compute_envace_role_grpo_advantage


compute_envace_role_grpo_advantage = _register()
