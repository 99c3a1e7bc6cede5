"""Pure tensor algorithms for training: role-wise GRPO advantages, the per-role moving-average baseline, policy
losses, KL estimators, aggregation.

Each family lives in a `Registry` (one signature per family); trainers pick functions by name from config.
"""

from envace.algos.advantages import ADVANTAGES, get_advantage_fn, grpo_advantages, role_grpo_advantages
from envace.algos.kl import KL_ESTIMATORS, entropy_from_logits, kl_penalty
from envace.algos.losses import AGGREGATIONS, POLICY_LOSSES, aggregate, ppo_clip_loss, vanilla_pg_loss
from envace.algos.moving_baseline import RoleMovingBaseline, carries_baseline, role_moving_average_advantages
from envace.registry import Registry

__all__ = [
    "ADVANTAGES",
    "AGGREGATIONS",
    "KL_ESTIMATORS",
    "POLICY_LOSSES",
    "Registry",
    "RoleMovingBaseline",
    "aggregate",
    "carries_baseline",
    "entropy_from_logits",
    "get_advantage_fn",
    "grpo_advantages",
    "kl_penalty",
    "ppo_clip_loss",
    "role_grpo_advantages",
    "role_moving_average_advantages",
    "vanilla_pg_loss",
]
