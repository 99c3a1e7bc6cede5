"""envace's V1 trainer for verl 0.9.1, registered as `trainer.v1.trainer_mode=envace`.

A subclass of verl's synchronous trainer (`PPOTrainerSync`) that changes two steps:
- `_compute_advantage`: with `algorithm.adv_estimator=envace_role_grpo` it fetches, besides the fields
  verl's own step reads from TransferQueue (uid, response mask, rm_scores, ...), each row's
  `extra_fields` (role, scored flag) and uses the row keys `{uid}_{session}_{index}` as trajectory ids,
  then groups by (uid, role) with envace's `role_grpo_advantages` (see advantage.py) and writes
  token-level advantages back. verl's own step, by contrast, keeps only each session's LAST row for
  GRPO and broadcasts its advantage to the session's other rows, which would erase the roles. KL in
  the reward and rollout correction are applied as in verl's step. Any other estimator runs verl's step.
- `_update_actor`: with `envace.single_update` (default) the actor takes exactly `envace.ppo_mini_batches`
  optimizer steps per epoch (1 = the paper's one step per training step; `actor.ppo_epochs` epochs): the
  mini-batch is 1/M of the (padded) batch, whatever number of role calls it holds, and the batch is
  padded to a multiple of M x lcm(n, data-parallel size) so it splits evenly. verl would otherwise split
  rows into mini-batches of ppo_mini_batch_size x n rows, and a step of EnvACE rows (one per role call)
  is several times that.
- `_compute_old_log_prob`, `_compute_ref_log_prob`, `_update_actor`: each row's log-probs are taken at the
  temperature it was sampled with (Act 1.0, Rehearse 0.01 in the paper), not at the one
  `rollout.temperature` verl passes for the whole batch (see temperature.py).
- `policy=per_role` (`envace.policy`): `_setup` also builds the Rehearse role's own actor, vLLM replicas and
  weight sync on a second pool; `_balance_batch` pads each role's rows on their own; old log-probs, the
  update and checkpoints go to each role's actor with its rows only (see per_role.py). Reference
  log-probs stay on the Act group: both roles start from the same weights.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
from omegaconf import open_dict

from envace.trainers.verl.advantage import ESTIMATOR, apply_role_advantages
from envace.trainers.verl.config import LoopSettings
from envace.trainers.verl.deps import require
from envace.trainers.verl.per_role import (
    REHEARSE_POOL,
    PairedCheckpointManagers,
    RoleClients,
    RoleGroups,
    batch_roles,
    join_parts,
    split_by_role,
)
from envace.trainers.verl.temperature import (
    TEMPERATURE_FIELD,
    RowTemperatureGroup,
    row_temperatures,
    uniform_temperature,
)

TRAINER_MODE = "envace"

_v1 = require("verl.trainer.ppo.v1")
_base = require("verl.trainer.ppo.v1.trainer_base")  # verl's own names (worker groups, managers, roles)
_tq = require("transfer_queue")
_protocol = require("verl.protocol")
_ray_trainer = require("verl.trainer.ppo.ray_trainer")
_padding = require("verl.workers.utils.padding")
_tensordict = require("tensordict")

# verl's advantage step reads these; absent ones (no critic, no reference) simply do not come back
_FIELDS = ("uid", "response_mask", "rm_scores", "rollout_log_probs", "old_log_probs", "ref_log_prob", "values")


@_v1.register_trainer(TRAINER_MODE)
class EnvaceTrainer(_v1.PPOTrainerSync):
    """verl's synchronous V1 trainer with role-wise GRPO advantages and one update per step."""

    @property
    def envace_settings(self) -> LoopSettings:
        if getattr(self, "_envace_settings", None) is None:
            self._envace_settings = LoopSettings.from_verl(self.config)
        return self._envace_settings

    @property
    def per_role(self) -> bool:
        return self.envace_settings.policy == "per_role"

    def _init_resource_pool_mgr(self) -> None:
        super()._init_resource_pool_mgr()
        if self.per_role:  # the Rehearse actor's pool: as many GPUs as verl's global pool
            spec = self.resource_pool_manager.resource_pool_spec
            spec[REHEARSE_POOL] = list(spec["global_pool"])

    def _setup(self) -> None:
        if not self.per_role:
            return super()._setup()
        self._defer_checkpoint_load = True  # verl's setup loads the Act actor last: load both once both exist
        try:
            super()._setup()
        finally:
            self._defer_checkpoint_load = False
        self._setup_rehearse_actor()
        self._load_checkpoint()

    def _setup_rehearse_actor(self) -> None:
        """The Rehearse role's actor + rollout worker group, its hybrid replicas and its weight sync."""
        pool = self.resource_pool_manager.resource_pool_dict[REHEARSE_POOL]
        role = str(_base.Role.ActorRollout)  # no reference model: the Act group's serves both roles
        worker = _base.RayClassWithInitArgs(cls=_base.ray.remote(_base.ActorRolloutRefWorker),
                                            config=self.config.actor_rollout_ref, role=role)
        group = _base.RayWorkerGroup(resource_pool=pool,
                                     ray_cls_with_init=_base.create_colocated_worker_cls(class_dict={role: worker}),
                                     device_name=self.config.trainer.device)
        self.rehearse_actor_wg = group.spawn(prefix_set={role})[role]
        self.rehearse_actor_wg.init_model()
        self.act_actor_wg = self.actor_rollout_wg
        # replica ranks after the Act replicas: their Ray actor names must not collide
        self.rehearse_llm_server_manager = _base.LLMServerManager.create(
            config=self.config, worker_group=self.rehearse_actor_wg, rollout_resource_pool=pool,
            start_rank=len(self.llm_server_manager.get_replicas()))
        engine_config = _base.omega_conf_to_dataclass(self.config.actor_rollout_ref.rollout.checkpoint_engine)
        engine_config.backend = "naive"
        rehearse_sync = _base.CheckpointEngineManager(config=engine_config, actor_wg=self.rehearse_actor_wg,
                                                      replicas=self.rehearse_llm_server_manager.get_replicas())
        rehearse_sync.sleep_replicas()
        self.checkpoint_manager = PairedCheckpointManagers(self.checkpoint_manager, rehearse_sync)

    def get_llm_client(self) -> Any:
        client = super().get_llm_client()
        if not self.per_role:
            return client
        return RoleClients(client, self.rehearse_llm_server_manager.get_client())

    def _role_groups(self, *, mini_batches: int | None = None) -> RoleGroups:
        return RoleGroups({"act": self.act_actor_wg, "rehearse": self.rehearse_actor_wg}, batch_roles,
                          mini_batches=mini_batches)

    @contextmanager
    def _actor_groups(self, **kwargs: Any) -> Iterator[None]:
        """Within (per-role runs): `actor_rollout_wg` routes each role's rows to its own actor."""
        if not self.per_role:
            yield
            return
        self.actor_rollout_wg = self._role_groups(**kwargs)
        try:
            yield
        finally:
            self.actor_rollout_wg = self.act_actor_wg

    def _load_checkpoint(self) -> Any:
        if getattr(self, "_defer_checkpoint_load", False):
            return None
        with self._actor_groups():
            return super()._load_checkpoint()

    def _save_checkpoint(self) -> Any:
        with self._actor_groups():
            return super()._save_checkpoint()

    def _balance_batch(self, batch: Any, metrics: dict, logging_prefix: str = "global_seqlen",
                       keep_minibatch: bool = False) -> Any:
        if not self.per_role:
            return super()._balance_batch(batch, metrics, logging_prefix=logging_prefix,
                                          keep_minibatch=keep_minibatch)
        # each role's rows padded to the multiple and balanced over the data-parallel ranks on their own
        parts = split_by_role(batch, batch_roles(batch))
        balanced = [super(EnvaceTrainer, self)._balance_batch(part, metrics, logging_prefix=f"{logging_prefix}/{role}",
                                                              keep_minibatch=keep_minibatch)
                    for role, part in parts.items()]
        return join_parts(balanced, batch)

    @contextmanager
    def _row_temperatures(self, batch: Any) -> Iterator[None]:
        """Within: the actor / reference worker groups compute each row at its sampling temperature."""
        td = _tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=["extra_fields"])
        # pop + tolist gives plain dicts (indexing would give tensordict's NonTensorData wrappers)
        temps = row_temperatures(td.pop("extra_fields").tolist(), self.config.actor_rollout_ref.rollout.temperature)
        uniform = uniform_temperature(temps)
        if uniform is None:
            if self.config.actor_rollout_ref.model.get("use_fused_kernels", False):
                raise ValueError("rows sampled at different temperatures (role temperatures) need per-row "
                                 "log-prob temperatures, which verl's fused kernels do not support; set "
                                 "actor_rollout_ref.model.use_fused_kernels=false")
            _tq.kv_batch_put(keys=batch.keys, partition_id=batch.partition_id,
                             fields=_tensordict.TensorDict({TEMPERATURE_FIELD: temps}, batch_size=len(batch)))
        names = [n for n in ("actor_rollout_wg", "ref_policy_wg") if getattr(self, n, None) is not None]
        saved = {n: getattr(self, n) for n in names}
        wrapped: dict[int, RowTemperatureGroup] = {}  # ref_policy_wg may be the actor's own group
        for n, group in saved.items():
            setattr(self, n, wrapped.setdefault(id(group), RowTemperatureGroup(group, uniform)))
        try:
            yield
        finally:
            for n, group in saved.items():
                setattr(self, n, group)

    def _compute_old_log_prob(self, batch: Any, metrics: dict) -> Any:
        with self._actor_groups(), self._row_temperatures(batch):
            return super()._compute_old_log_prob(batch, metrics)

    def _compute_ref_log_prob(self, batch: Any, metrics: dict) -> Any:
        with self._row_temperatures(batch):
            return super()._compute_ref_log_prob(batch, metrics)

    def _compute_advantage(self, batch: Any, metrics: dict) -> Any:
        algo = self.config.algorithm
        if algo.adv_estimator != ESTIMATOR:
            return super()._compute_advantage(batch, metrics)
        td = _tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id,
                              select_fields=list(_FIELDS) + ["extra_fields"])
        nested_mask = td["response_mask"]
        extra = td.pop("extra_fields").tolist()  # plain dicts (iterating would give NonTensorData wrappers)
        uids = np.array([str(u) for u in td.pop("uid").tolist()], dtype=object)
        data = _protocol.DataProto(batch=td.to_padded_tensor())
        data.non_tensor_batch["uid"] = uids
        data.batch["token_level_scores"] = data.batch["rm_scores"]
        if algo.use_kl_in_reward:
            data, kl_metrics = _ray_trainer.apply_kl_penalty(data, kl_ctrl=self.kl_ctrl_in_reward,
                                                             kl_penalty=algo.kl_penalty)
            metrics.update(kl_metrics)
        else:
            data.batch["token_level_rewards"] = data.batch["token_level_scores"]
        correction = algo.get("rollout_correction", None)
        bypass = bool(correction and correction.get("bypass_mode", False))
        corrected = correction is not None and "rollout_log_probs" in data.batch and not bypass
        if corrected:
            helper = require("verl.trainer.ppo.rollout_corr_helper")
            data, is_metrics = helper.compute_rollout_correction_and_add_to_batch(data, correction)
            metrics.update(is_metrics)
        settings = self.envace_settings
        metrics.update(apply_role_advantages(data, batch.keys, extra, batch.tags, weighting=settings.weighting,
                                             norm_std=bool(algo.get("norm_adv_by_std_in_grpo", False))))
        names = ["advantages", "returns"]
        if algo.use_kl_in_reward:
            names.append("token_level_rewards")
        if corrected:
            names.append("response_mask")
            if "rollout_is_weights" in data.batch:
                names.append("rollout_is_weights")
        out = _tensordict.TensorDict({k: _padding.response_to_nested(data.batch[k], nested_mask) for k in names},
                                     batch_size=len(batch))
        return _tq.kv_batch_put(keys=batch.keys, partition_id=batch.partition_id, fields=out)

    def _get_required_batch_multiple(self, dp_size: int) -> int:
        if not self.envace_settings.single_update:
            return super()._get_required_batch_multiple(dp_size)
        # M equal mini-batches, each a whole number of n-row units (verl multiplies by n) and of dp shards
        n = int(self.config.actor_rollout_ref.rollout.n)
        multiple = self.envace_settings.ppo_mini_batches * math.lcm(n, dp_size)
        if self.use_critic:  # the critic keeps verl's own mini-batches
            multiple = math.lcm(multiple, int(self.config.critic.ppo_mini_batch_size) * n)
        return multiple

    def _update_actor(self, batch: Any, metrics: dict) -> Any:
        m = self.envace_settings.ppo_mini_batches if self.envace_settings.single_update else None
        with self._actor_groups(mini_batches=m), self._row_temperatures(batch):
            return self._update_actor_once(batch, metrics)

    def _update_actor_once(self, batch: Any, metrics: dict) -> Any:
        if not self.envace_settings.single_update:
            return super()._update_actor(batch, metrics)
        actor = self.config.actor_rollout_ref.actor
        n = int(self.config.actor_rollout_ref.rollout.n)
        m = self.envace_settings.ppo_mini_batches
        rows = len(batch)
        if rows % (n * m):
            raise ValueError(f"{rows} rows are not a multiple of rollout.n x envace.ppo_mini_batches = {n} x {m}; "
                             "the envace trainer pads batches to that multiple, so check trainer.v1.trainer_mode")
        previous = actor.ppo_mini_batch_size
        # verl sizes the mini-batch as ppo_mini_batch_size x n rows: make that 1/M of the batch, for this call only
        with open_dict(actor):
            actor.ppo_mini_batch_size = rows // (n * m)
        try:
            return super()._update_actor(batch, metrics)
        finally:
            with open_dict(actor):
                actor.ppo_mini_batch_size = previous
