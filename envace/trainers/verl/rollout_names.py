"""The Rehearse actor's own rollout name (`policy=per_role` on verl 0.9.1): its vLLM servers, the worker
side's lookup of them and its weight-sync socket are all keyed by a name of their own.

Why a name: in verl 0.9.1 a hybrid replica of rank r takes workers [r*W, (r+1)*W) of its worker group,
and the worker side derives r from its own RANK within that group; it then finds its server actor as
`{rollout.name}_server_{r}_{node}` and names its weight-sync ZMQ socket after r and its node-local rank.
The Rehearse worker group has its own ranks (0, 1, ...), so its replicas must start at rank 0 — and
then every one of those names would be an Act name: Ray refuses the duplicate server actors, or a
Rehearse worker would push its weights into an Act server. The Rehearse stack therefore runs under the
rollout name `envace_rehearse_<backend>` on both sides:
- server side: `RolloutReplicaRegistry` knows the name; its replica class is verl's own one for the
  backend with the server-name prefix `envace_rehearse_<backend>_` (verl's `_get_server_name_prefix`
  hook), so its server actors are `envace_rehearse_vllm_server_{r}_{node}`;
- worker side: verl's `_ROLLOUT_REGISTRY` maps the name to verl's own adapter class for the backend,
  whose lookup prefix is `{rollout.name}_` already;
- the weight-sync socket, which verl keys by (job id, replica rank, local rank) on both ends: the sending
  adapter and the receiving engine (verl's server passes it the job id as VERL_RAY_JOB_ID) both use the
  job id qualified by the name, `<job>-envace_rehearse_vllm`.
Both classes are built on first use from whatever verl has registered for the backend, so they follow
verl's classes (`register()` runs in every verl process through the plugin).

Departure: per-role runs on vLLM only; SGLang's server adapter keys its own names and sleep levels by
`rollout.name == "sglang"`, so a renamed SGLang stack would not run as SGLang (refused in the config).
"""

from __future__ import annotations

import os
from functools import cache
from typing import Any

from envace.trainers.verl.deps import VERL_VERSION, require

PREFIX = "envace_rehearse_"
BACKENDS = ("vllm",)  # per-role backends: see the module docstring
_ADAPTERS = {"vllm": "VllmRehearseServerAdapter"}  # attributes of this module (built on first access)
_SERVER_MODULES = {"vllm": "verl.workers.rollout.vllm_rollout.vllm_async_server"}
_SERVER_CLASSES = {"vllm": "vLLMHttpServer"}  # looked up when a replica is built
JOB_ENV = "VERL_RAY_JOB_ID"  # what verl's vLLM server passes its engine processes (their socket paths)


def rehearse_rollout_name(backend: str) -> str:
    """The Rehearse stack's rollout name for a backend (`vllm` -> `envace_rehearse_vllm`)."""
    if backend not in BACKENDS:
        raise ValueError(f"policy=per_role runs its Rehearse servers on {' / '.join(BACKENDS)}; rollout.name is "
                         f"{backend!r}: set rollout=vllm in the launch config")
    return f"{PREFIX}{backend}"


def base_backend(name: str) -> str:
    """`envace_rehearse_vllm` -> `vllm`; any other name is returned as is."""
    return name[len(PREFIX):] if name.startswith(PREFIX) else name


def job_key(job_id: str, name: str) -> str:
    """The job-id part of a Rehearse weight-sync socket path: verl's job id qualified by the name."""
    return f"{job_id}-{name}"


@cache
def server_class(parent: type, name: str) -> type:
    """verl's vLLM server class whose engine processes name their weight-sync socket under `name`: verl
    forwards the Ray job id to them as VERL_RAY_JOB_ID (the receiving end builds its socket path from it),
    so the Rehearse server hands on the qualified job id instead."""

    class RehearseServer(parent):  # type: ignore[misc, valid-type]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            import ray

            os.environ[JOB_ENV] = job_key(ray.get_runtime_context().get_job_id(), name)

    RehearseServer.__name__ = RehearseServer.__qualname__ = f"Rehearse{parent.__name__}"
    return RehearseServer


@cache
def replica_class(backend: str) -> type:
    """verl's replica class for `backend`: server actors `envace_rehearse_<backend>_server_{r}_{node}`,
    each a `server_class` of verl's own server."""
    replica = require("verl.workers.rollout.replica")
    parent = replica.RolloutReplicaRegistry.get(backend)
    name = rehearse_rollout_name(backend)

    class RehearseReplica(parent):  # type: ignore[misc, valid-type]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            import ray

            servers = require(_SERVER_MODULES[backend])
            self.server_class = ray.remote(server_class(getattr(servers, _SERVER_CLASSES[backend]), name))

        def _get_server_name_prefix(self) -> str:
            return f"{name}_"

    RehearseReplica.__name__ = RehearseReplica.__qualname__ = f"Rehearse{parent.__name__}"
    return RehearseReplica


@cache
def adapter_class(backend: str) -> type:
    """verl's worker-side server adapter for `backend`: its server lookup already reads `{rollout.name}_`;
    its weight-sync socket gets the qualified job id the Rehearse server hands its engine."""
    base = require("verl.workers.rollout.base")
    parent = base.get_rollout_class(backend, "async")
    name = rehearse_rollout_name(backend)

    class RehearseServerAdapter(parent):  # type: ignore[misc, valid-type]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            import ray

            job = ray.get_runtime_context().get_job_id()
            marker = f"-zmq-{job}-"
            if marker not in self.zmq_handle:
                raise RuntimeError(f"verl's weight-sync socket {self.zmq_handle!r} does not hold the job id as "
                                   f"'{marker}'; envace's Rehearse rollout name expects verl {VERL_VERSION}'s layout")
            self.zmq_handle = self.zmq_handle.replace(marker, f"-zmq-{job_key(job, name)}-", 1)

    RehearseServerAdapter.__name__ = RehearseServerAdapter.__qualname__ = _ADAPTERS[backend]
    RehearseServerAdapter.__module__ = __name__
    return RehearseServerAdapter


def __getattr__(attr: str) -> Any:  # verl's registry imports the adapter by dotted name
    for backend, name in _ADAPTERS.items():
        if attr == name:
            return adapter_class(backend)
    raise AttributeError(f"module {__name__!r} has no attribute {attr!r}")


def register() -> None:
    """Make every Rehearse rollout name known to verl's replica and worker-side registries."""
    replica = require("verl.workers.rollout.replica")
    base = require("verl.workers.rollout.base")
    for backend in BACKENDS:
        name = rehearse_rollout_name(backend)
        replica.RolloutReplicaRegistry.register(name, lambda backend=backend: replica_class(backend))
        base._ROLLOUT_REGISTRY[(name, "async")] = f"{__name__}.{_ADAPTERS[backend]}"


def rehearse_config(config: Any) -> Any:
    """A copy of verl's whole config whose rollout runs under the Rehearse rollout name."""
    from omegaconf import OmegaConf, open_dict

    out = OmegaConf.create(OmegaConf.to_container(config, resolve=False))
    OmegaConf.set_struct(out, OmegaConf.is_struct(config))
    with open_dict(out):
        out.actor_rollout_ref.rollout.name = rehearse_rollout_name(str(config.actor_rollout_ref.rollout.name))
    return out


register()
