"""envace's V1 trainer for verl 0.9.1, registered as `trainer.v1.trainer_mode=envace`.

A subclass of verl's synchronous trainer (`PPOTrainerSync`); to verl's base class it is "sync"
(`trainer_mode` reads "sync": verl's sync replay buffer, its dataloader batch size, no TransferQueue
checkpoint per save). It changes these steps and leaves the rest to verl:
- `_init_dataloader`: after verl's (overlong prompts filtered), epochs are raised to reach the configured
  steps, or the run stops with an error naming the files when no full batch is left (schedule.py).
- `_compute_advantage`: first the unscored-episode stop rule (unscored_guard.py: more than
  `envace.unscored.threshold` of the step's episodes unscored for `envace.unscored.patience` steps stops
  the run, naming the judge). Then, with `algorithm.adv_estimator=envace_role_grpo`, verl's own step runs (KL in
  the reward, rollout correction, write-back to TransferQueue) with its grouping function swapped for
  envace's `apply_role_advantages` (advantage.py): rows grouped by (prompt uid, role), the row keys
  `{uid}_{session}_{index}` as trajectory ids, each row's `extra_fields` (role, scored flag) read from
  TransferQueue. verl's own grouping keeps only each session's LAST row and broadcasts its advantage to
  the session's other rows, which would erase the roles. Any other estimator runs verl's step as is.
- `_update_actor`: with `envace.single_update` (default) the actor takes exactly `envace.ppo_mini_batches`
  optimizer steps per epoch (1 = the paper's one step per training step; `actor.ppo_epochs` epochs):
  verl's step runs, and its worker gets `num_mini_batch = M` instead of a mini-batch size, so the
  mini-batch is 1/M of the (padded) batch whatever number of role calls it holds; the batch is padded to
  a multiple of M x lcm(n, data-parallel size) so it splits evenly. verl would otherwise split rows into
  mini-batches of ppo_mini_batch_size x n rows, and a step of EnvACE rows (one per role call) is several
  times that.
- `_compute_old_log_prob`, `_compute_ref_log_prob`, `_update_actor`: each row's log-probs are taken at the
  temperature it was sampled with (Act 1.0, Rehearse 0.01 in the paper), not at the one
  `rollout.temperature` verl passes for the whole batch (see temperature.py).
- `policy=per_role` (`envace.policy`): `_setup` also builds the Rehearse role's own actor, vLLM replicas and
  weight sync on a second pool, under the Rehearse rollout name (rollout_names.py); `_balance_batch` pads
  each role's rows on their own; old log-probs, the update and checkpoints go to each role's actor with
  its rows only (see per_role.py). Reference log-probs stay on the Act group: both roles start from the
  same weights.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from omegaconf import open_dict

from envace.trainers.unscored_guard import UnscoredGuard, episode_counts
from envace.trainers.verl.advantage import ESTIMATOR, apply_role_advantages, row_key_parts
from envace.trainers.verl.config import LoopSettings
from envace.trainers.verl.deps import require
from envace.trainers.verl.per_role import (
    REHEARSE_POOL,
    MiniBatchCount,
    PairedCheckpointManagers,
    RoleClients,
    RoleGroups,
    batch_roles,
    join_parts,
    split_by_role,
)
from envace.trainers.verl.rollout_names import rehearse_config
from envace.trainers.verl.schedule import reconcile_epochs
from envace.trainers.verl.temperature import (
    TEMPERATURE_FIELD,
    RowTemperatureGroup,
    row_temperatures,
    uniform_temperature,
)

TRAINER_MODE = "envace"
VERL_MODE = "sync"  # the verl trainer mode EnvaceTrainer runs as

_v1 = require("verl.trainer.ppo.v1")
_base = require("verl.trainer.ppo.v1.trainer_base")  # verl's own names (worker groups, managers, roles)
_tq = require("transfer_queue")
_tensordict = require("tensordict")


@_v1.register_trainer(TRAINER_MODE)
class EnvaceTrainer(_v1.PPOTrainerSync):
    """verl's synchronous V1 trainer with role-wise GRPO advantages and one update per step."""

    # verl picks this class by trainer.v1.trainer_mode ("envace", the registry key) and stores that key as
    # self.trainer_mode, which its base class reads as "not sync" (async replay buffer, gen_batch_size 1,
    # a TransferQueue checkpoint per save); to verl this trainer is its sync trainer
    @property
    def trainer_mode(self) -> str:
        return VERL_MODE

    @trainer_mode.setter
    def trainer_mode(self, value: str) -> None:
        if value not in (TRAINER_MODE, VERL_MODE):
            raise ValueError(f"EnvaceTrainer runs as trainer.v1.trainer_mode={TRAINER_MODE}, got {value!r}")

    def _init_dataloader(self) -> None:
        """verl's dataloaders, then epochs reconciled with the configured steps on the rows left after
        verl's overlong-prompt filter (verl would stop after total_epochs, short of the steps, silently)."""
        batch, files = int(self.config.data.train_batch_size), list(self.config.data.train_files)
        try:
            super()._init_dataloader()
        except ValueError:  # verl's sampler refuses an empty dataset with its own words
            dataset = getattr(self, "train_dataset", None)
            if dataset is None:
                raise
            reconcile_epochs(rows=len(dataset), batch_size=batch, steps=None, epochs=1, files=files)
            raise
        epochs = reconcile_epochs(rows=len(self.train_dataset), batch_size=batch,
                                  steps=self.config.trainer.total_training_steps,
                                  epochs=int(self.config.trainer.total_epochs), files=files)
        if epochs != int(self.config.trainer.total_epochs):
            print(f"envace: {len(self.train_dataset)} training rows after filtering = {self.steps_per_epoch} steps "
                  f"per epoch; trainer.total_epochs {self.config.trainer.total_epochs} -> {epochs} to reach "
                  f"trainer.total_training_steps={self.total_training_steps}")
            with open_dict(self.config):
                self.config.trainer.total_epochs = epochs

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
        """The Rehearse role's actor + rollout worker group, its hybrid replicas and its weight sync, all
        under the Rehearse rollout name (rollout_names.py): replica ranks start at 0 within its own group."""
        pool = self.resource_pool_manager.resource_pool_dict[REHEARSE_POOL]
        self.rehearse_config = rehearse_config(self.config)
        role = str(_base.Role.ActorRollout)  # no reference model: the Act group's serves both roles
        worker = _base.RayClassWithInitArgs(cls=_base.ray.remote(_base.ActorRolloutRefWorker),
                                            config=self.rehearse_config.actor_rollout_ref, role=role)
        group = _base.RayWorkerGroup(resource_pool=pool,
                                     ray_cls_with_init=_base.create_colocated_worker_cls(class_dict={role: worker}),
                                     device_name=self.config.trainer.device)
        self.rehearse_actor_wg = group.spawn(prefix_set={role})[role]
        self.rehearse_actor_wg.init_model()
        self.act_actor_wg = self.actor_rollout_wg
        self.rehearse_llm_server_manager = _base.LLMServerManager.create(
            config=self.rehearse_config, worker_group=self.rehearse_actor_wg, rollout_resource_pool=pool)
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

    def _check_unscored(self, keys: list[str], extra: list[Any], tags: list[dict] | None, metrics: dict) -> None:
        """The unscored-episode stop rule (envace.trainers.unscored_guard) on one step's rows: an episode is a
        row key's `{uid}_{session}`; verl's padding rows are not episodes; rows without envace's flag count
        as scored."""
        if getattr(self, "_unscored_guard", None) is None:
            settings = self.envace_settings
            judge = (f"{settings.judge.model} at {settings.judge.base_url}" if settings.judge is not None
                     else f"envace.reward={settings.reward}")
            self._unscored_guard = UnscoredGuard.from_config(settings.unscored, judge=judge)
        rows = []
        for key, fields, tag in zip(keys, extra, tags or [{}] * len(keys)):
            if (tag or {}).get("is_padding", False):
                continue
            uid, session, _ = row_key_parts(key)
            fields = getattr(fields, "data", fields)
            rows.append((f"{uid}_{session}", bool((fields if isinstance(fields, dict) else {}).get("envace_scored",
                                                                                                   True))))
        unscored, total = episode_counts(rows)
        metrics["envace/episodes/unscored_share"] = self._unscored_guard.observe(
            int(getattr(self, "global_steps", 0)), unscored, total)

    def _compute_advantage(self, batch: Any, metrics: dict) -> Any:
        """verl's own step (KL in the reward, rollout correction, write-back to TransferQueue) with its
        grouping replaced: rows grouped by (prompt uid, role) instead of verl's last-row-per-session GRPO.
        First, the unscored-episode stop rule (a dead judge stops the run instead of training nothing)."""
        td = _tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=["extra_fields"])
        extra = td.pop("extra_fields").tolist()  # plain dicts (iterating would give NonTensorData wrappers)
        self._check_unscored(list(batch.keys), extra, batch.tags, metrics)
        if self.config.algorithm.adv_estimator != ESTIMATOR:
            return super()._compute_advantage(batch, metrics)
        verls = _base.compute_advantage_for_multi_trajectories
        settings = self.envace_settings

        def role_grouping(data: Any, batch_keys: list[str], adv_estimator: Any, **kwargs: Any) -> Any:
            if adv_estimator != ESTIMATOR:
                return verls(data, batch_keys=batch_keys, adv_estimator=adv_estimator, **kwargs)
            metrics.update(apply_role_advantages(data, batch_keys, extra, batch.tags, weighting=settings.weighting,
                                                 norm_std=bool(kwargs.get("norm_adv_by_std_in_grpo", False))))
            return data

        _base.compute_advantage_for_multi_trajectories = role_grouping
        try:
            return super()._compute_advantage(batch, metrics)
        finally:
            _base.compute_advantage_for_multi_trajectories = verls

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
        n = int(self.config.actor_rollout_ref.rollout.n)
        m = self.envace_settings.ppo_mini_batches
        rows = len(batch)
        if rows % (n * m):
            raise ValueError(f"{rows} rows are not a multiple of rollout.n x envace.ppo_mini_batches = {n} x {m}; "
                             "the envace trainer pads batches to that multiple, so check trainer.v1.trainer_mode")
        if self.per_role:  # RoleGroups sets each role's mini-batch count on its own rows
            return super()._update_actor(batch, metrics)
        saved = self.actor_rollout_wg
        self.actor_rollout_wg = MiniBatchCount(saved, m)
        try:
            return super()._update_actor(batch, metrics)
        finally:
            self.actor_rollout_wg = saved
