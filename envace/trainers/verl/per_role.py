"""The per-role policy on verl 0.9.1 (`policy=per_role`): the Rehearse role gets its own actor, vLLM
replicas and weight sync, and each actor is updated only from its own role's rows (the embedded
trainer's `policy=per_role`, the paper's shared-vs-per-role ablation).

What envace's trainer (trainer.py) builds on top of verl's own setup, which builds the Act stack:
- a second resource pool, `REHEARSE_POOL`, the same size as verl's global pool (trainer.nnodes x
  trainer.n_gpus_per_node more GPUs), holding an actor + rollout worker group (`Role.ActorRollout`, no
  reference model: both roles start from the same weights, so the Act group's reference serves every row);
- that group's hybrid vLLM replicas (`LLMServerManager`, ranks from 0 within the group, under the
  Rehearse rollout name so their server actors, lookups and sockets are their own: rollout_names.py)
  and its `CheckpointEngineManager`; `PairedCheckpointManagers` makes
  verl's weight sync / sleep / wake calls reach both;
- `RoleClients`, the LLM client verl hands the agent loops: `generate` is the Act client's, and the
  envace agent loop sends Rehearse calls to `.rehearse`;
- `RoleGroups`, which stands in for `actor_rollout_wg` while old log-probs, the update and checkpoints
  run: it splits the batch by each row's `extra_fields["role"]` and calls each role's group with its
  rows only. Checkpoints go to `global_step_N/actor` (Act) and `global_step_N/rehearse_actor`.

Batch shape: each role's rows are padded and balanced on their own (`split_by_role` then verl's
`_balance_batch` per part), so each part splits into the actor's mini-batches and data-parallel shards.
With `envace.single_update`, each actor takes `envace.ppo_mini_batches` optimizer steps per epoch
over its own rows (the embedded trainer's per-role update: one step per model per training step).

Departures: the Rehearse pool is a separate pool (colocating both actors on one pool would need both
vLLM servers awake together during rollout, see docs/gpu.md); only a GPU cluster runs the worker groups,
replicas and weight sync (the CPU tests drive the routing, padding and checkpoint paths through verl's
real TransferQueue and trainer methods).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

from envace.trainers.verl.deps import require
from envace.types import Role

_tq = require("transfer_queue")
_llm_server = require("verl.workers.rollout.llm_server")

REHEARSE_POOL = "envace_rehearse_pool"
REHEARSE_CHECKPOINT_DIR = "rehearse_actor"  # beside verl's "actor" in global_step_N/
ROLES = (Role.ACT.value, Role.REHEARSE.value)


def row_roles(extra_fields: Sequence[Any], keys: Sequence[str]) -> list[str]:
    """Each row's role ("act" / "rehearse") from its extra_fields; a row without one is refused."""
    roles = []
    for key, extra in zip(keys, extra_fields):
        extra = getattr(extra, "data", extra)  # tensordict's NonTensorData wrapper holds the dict
        role = extra.get("role") if isinstance(extra, dict) else None
        if role not in ROLES:
            raise ValueError(f"row {key!r} has extra_fields role {role!r}; policy=per_role routes rows by role "
                             f"({' / '.join(ROLES)}), which only the envace_agent loop records")
        roles.append(role)
    return roles


def batch_roles(batch: Any) -> list[str]:
    """The role of every row of a TransferQueue batch (padding rows carry their template row's role)."""
    td = _tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=["extra_fields"])
    return row_roles(td.pop("extra_fields").tolist(), batch.keys)


def split_by_role(batch: Any, roles: Sequence[str]) -> dict[str, Any]:
    """{role: sub-batch} in row order, roles without rows left out; each part has its own extra_info copy."""
    if len(roles) != len(batch):
        raise ValueError(f"{len(roles)} roles for a batch of {len(batch)} rows")
    parts = {}
    for role in ROLES:
        idx = [i for i, r in enumerate(roles) if r == role]
        if idx:
            parts[role] = _tq.KVBatchMeta(keys=[batch.keys[i] for i in idx], tags=[batch.tags[i] for i in idx],
                                          partition_id=batch.partition_id, fields=batch.fields,
                                          extra_info=dict(batch.extra_info or {}))
    return parts


def join_parts(parts: Sequence[Any], like: Any) -> Any:
    """One batch holding the parts' rows in order, with `like`'s partition and extra_info."""
    return _tq.KVBatchMeta(keys=[k for p in parts for k in p.keys], tags=[t for p in parts for t in p.tags],
                           partition_id=like.partition_id, fields=like.fields, extra_info=like.extra_info)


class RoleGroups:
    """Stands in for verl's `actor_rollout_wg`: each call goes to every role's own actor worker group
    with that role's rows. Dispatch info (data-parallel layout) is the Act group's; both pools are the
    same size, so both groups have the same layout.

    `roles_of(batch)` gives each row's role; `mini_batches` (envace.single_update) sizes each role's
    update mini-batch as 1/M of its own rows, else verl's `mini_batch_size` from extra_info stands.
    """

    def __init__(self, groups: dict[str, Any], roles_of: Callable[[Any], list[str]] = batch_roles, *,
                 mini_batches: int | None = None) -> None:
        missing = set(ROLES) - set(groups)
        if missing:
            raise ValueError(f"per-role groups need a worker group for {sorted(missing)}")
        self.groups = groups
        self.roles_of = roles_of
        self.mini_batches = mini_batches

    def __getattr__(self, name: str) -> Any:  # _dispatch_info, _query_dispatch_info, profiling: Act's
        return getattr(self.groups[Role.ACT.value], name)

    def _parts(self, batch: Any) -> dict[str, Any]:
        return split_by_role(batch, self.roles_of(batch))

    def compute_log_prob(self, batch: Any) -> Any:
        for role, part in self._parts(batch).items():
            self.groups[role].compute_log_prob(part)
        return batch

    def update_actor(self, batch: Any) -> dict[str, Any]:
        """Each actor's update on its rows; metrics come back per role (`<role>/<verl name>`), plus the
        pooled `mfu` verl's step reads."""
        metrics: dict[str, Any] = {"mfu": []}
        for role, part in self._parts(batch).items():
            if self.mini_batches:
                if len(part) % self.mini_batches:
                    raise ValueError(f"{len(part)} {role} rows do not split into {self.mini_batches} mini-batches; "
                                     "the per-role trainer pads each role's rows to that multiple")
                set_mini_batch_count(part, self.mini_batches)
            out = self.groups[role].update_actor(part)
            for name, value in dict(out["metrics"]).items():
                if name == "mfu":
                    metrics["mfu"].extend(value if isinstance(value, list) else [value])
                metrics[f"{role}/{name}"] = value
        return {"metrics": metrics}

    def save_checkpoint(self, local_path: str, hdfs_path: str | None = None, global_step: int = 0,
                        max_ckpt_to_keep: int | None = None, **kwargs: Any) -> None:
        self.groups[Role.ACT.value].save_checkpoint(local_path, hdfs_path, global_step,
                                                    max_ckpt_to_keep=max_ckpt_to_keep, **kwargs)
        self.groups[Role.REHEARSE.value].save_checkpoint(
            rehearse_path(local_path), rehearse_path(hdfs_path) if hdfs_path else None, global_step,
            max_ckpt_to_keep=max_ckpt_to_keep, **kwargs)

    def load_checkpoint(self, local_path: str, **kwargs: Any) -> None:
        self.groups[Role.ACT.value].load_checkpoint(local_path=local_path, **kwargs)
        path = rehearse_path(local_path)
        if not os.path.isdir(path):
            raise FileNotFoundError(f"{path}: the Rehearse actor's checkpoint is missing beside {local_path}; "
                                    "resume a per-role run from its own checkpoints (or policy=shared)")
        self.groups[Role.REHEARSE.value].load_checkpoint(local_path=path, **kwargs)


def set_mini_batch_count(batch: Any, mini_batches: int) -> Any:
    """Have verl's actor worker split `batch` into `mini_batches` equal mini-batches (its `num_mini_batch`,
    which it reads only when `mini_batch_size` is absent) whatever its row count; `global_batch_size`
    (the rows of one mini-batch over all data-parallel ranks, verl's seq-mean loss normaliser) follows."""
    batch.extra_info.pop("mini_batch_size", None)
    batch.extra_info.update(num_mini_batch=mini_batches, global_batch_size=len(batch) // mini_batches)
    return batch


class MiniBatchCount:
    """Stands in for verl's `actor_rollout_wg` during the update: `update_actor` gets `set_mini_batch_count`
    first; everything else is the wrapped group's."""

    def __init__(self, group: Any, mini_batches: int) -> None:
        self._group = group
        self._mini_batches = mini_batches

    def __getattr__(self, name: str) -> Any:
        return getattr(self._group, name)

    def update_actor(self, batch: Any) -> Any:
        return self._group.update_actor(set_mini_batch_count(batch, self._mini_batches))


def rehearse_path(actor_path: str) -> str:
    """global_step_N/actor -> global_step_N/rehearse_actor."""
    return os.path.join(os.path.dirname(actor_path.rstrip("/")), REHEARSE_CHECKPOINT_DIR)


class PairedCheckpointManagers:
    """verl's `checkpoint_manager` for two actors: every method call (update_weights, sleep_replicas,
    wake_up_replicas, ...) runs on the Act manager, then the Rehearse one; the Act result is returned."""

    def __init__(self, act: Any, rehearse: Any) -> None:
        self.act = act
        self.rehearse = rehearse

    def __getattr__(self, name: str) -> Any:
        first, second = getattr(self.act, name), getattr(self.rehearse, name)
        if not callable(first):
            return first

        def both(*args: Any, **kwargs: Any) -> Any:
            result = first(*args, **kwargs)
            second(*args, **kwargs)
            return result

        return both


class RoleClients(_llm_server.LLMServerClient):
    """The LLM client of a per-role run: `generate` is the Act client's; `.rehearse` reaches the Rehearse
    actor's replicas (the envace agent loop sends Rehearse calls there). verl pickles the client into
    every agent-loop worker; both inner clients are verl's own (a load-balancer handle each)."""

    def __init__(self, act: Any, rehearse: Any) -> None:  # no super().__init__: the inner clients hold the state
        self.act = act
        self.rehearse = rehearse
        self.config = act.config

    def __setattr__(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value)
        if name == "tokenizer":  # verl's agent-loop manager hands its tokenizer to the client
            self.act.tokenizer = self.rehearse.tokenizer = value

    async def generate(self, request_id: Any, **kwargs: Any) -> Any:
        return await self.act.generate(request_id, **kwargs)
