"""CPU stand-ins for the GPU-only pieces of verl's hybrid rollout, so verl's own server plumbing
(`LLMServerManager.create`, `vLLMReplica.launch_servers`, the worker-side `ServerAdapter` lookup and
weight-sync socket) runs on a CPU Ray cluster.

- `install_vllm_import_surface()`: vLLM cannot be installed here, and verl's vLLM modules import it at
  module level. A meta-path finder answers every `vllm.*` import with an empty module whose attributes
  are mocks and reports vllm 0.18.0 to `importlib.metadata`, so verl's real `vLLMReplica`,
  `vLLMHttpServer` and `ServerAdapter` classes import. Nothing of vLLM itself ever runs.
- `CPUServer`: stands in for `vLLMHttpServer` (registered where verl looks for it: the module global
  `vllm_async_server.vLLMHttpServer`, which `vLLMReplica.__init__` wraps with `ray.remote`). It keeps
  verl's constructor signature and its worker-count assertion, and records what reaches it.
- `ProbeWorker`: stands in for verl's `ActorRolloutRefWorker` (a real verl `Worker` in a real
  `RayWorkerGroup`). Its `update_weights` does what verl's worker does up to the GPU: builds the rollout
  adapter verl's registry names for its `rollout.name` and calls it, so the adapter finds its server by
  name and sends over its ZMQ socket path.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.metadata
import os
import sys
import types
from types import SimpleNamespace
from typing import Any
from unittest import mock

from verl.single_controller.base import Worker
from verl.single_controller.base.decorator import Dispatch, register

FAKE_VLLM_VERSION = "0.18.0"


class _VllmFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path=None, target=None):
        if name == "vllm" or name.startswith("vllm."):
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        module = types.ModuleType(spec.name)
        module.__path__ = []
        module.__version__ = FAKE_VLLM_VERSION
        module.__getattr__ = lambda attr, _n=spec.name: mock.MagicMock(name=f"{_n}.{attr}")
        return module

    def exec_module(self, module):
        pass


_REAL_VERSION = importlib.metadata.version


def _version(name: str) -> str:
    return FAKE_VLLM_VERSION if name == "vllm" else _REAL_VERSION(name)


def install_vllm_import_surface() -> None:
    if not any(isinstance(f, _VllmFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _VllmFinder())
    importlib.metadata.version = _version


def uninstall_vllm_import_surface() -> None:
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _VllmFinder)]
    importlib.metadata.version = _REAL_VERSION
    for name in [n for n in sys.modules if n == "vllm" or n.startswith("vllm.") or ".vllm_rollout" in n
                 or n.startswith("verl.third_party.vllm")]:
        del sys.modules[name]


class CPUServer:
    """`vLLMHttpServer`'s constructor and the calls verl's replica, client and adapter make on it."""

    def __init__(self, config, model_config, rollout_mode, workers, replica_rank, node_rank, gpus_per_node,
                 nnodes, cuda_visible_devices, **kwargs):
        import ray

        # verl's own check (vllm_async_server.py): one worker per local GPU of the replica
        assert len(workers) == gpus_per_node * 1, f"{len(workers)} workers for {gpus_per_node} GPUs"
        self.replica_rank, self.node_rank = replica_rank, node_rank
        self.worker_ids = [w._actor_id.hex() for w in workers]
        self.synced: list[dict[str, Any]] = []
        # what verl's vLLMHttpServer forwards to its engine processes (their weight-sync socket paths)
        os.environ["VERL_REPLICA_RANK"] = str(replica_rank)
        os.environ["VERL_RAY_JOB_ID"] = ray.get_runtime_context().get_job_id()

    def get_master_address(self):
        return "127.0.0.1", 0, 0

    async def launch_server(self, master_address=None, master_port=None, dp_rpc_port=None):
        return None

    def get_server_address(self):
        import zlib

        import ray

        # a port per actor name, so the load balancer tells Act and Rehearse servers apart
        return "127.0.0.1", 20000 + zlib.crc32(ray.get_runtime_context().get_actor_name().encode()) % 20000

    def receiver_zmq_handle(self, local_rank: int = 0) -> str:
        """The socket path verl's vLLM worker extension would bind in this server's engine processes
        (verl's own `_get_zmq_handle`, reading this process's environment)."""
        from verl.workers.rollout.vllm_rollout.utils import vLLMColocateWorkerExtension

        return vLLMColocateWorkerExtension._get_zmq_handle(SimpleNamespace(model_runner=None, local_rank=local_rank))

    async def collective_rpc(self, method, timeout=None, args=(), kwargs=None):
        self.synced.append({"method": method})

    def record(self, worker_id: str, zmq_handle: str, global_steps: int | None) -> None:
        self.synced.append({"worker": worker_id, "zmq": zmq_handle, "global_steps": global_steps})

    def seen(self) -> dict[str, Any]:
        return {"replica_rank": self.replica_rank, "node_rank": self.node_rank, "worker_ids": self.worker_ids,
                "synced": list(self.synced), "receiver_zmq": self.receiver_zmq_handle()}

    async def wait_for_requests_to_drain(self):
        return None

    async def sleep(self):
        return None

    async def wake_up(self, tags=None):
        return None

    async def clear_kv_cache(self):
        return None

    async def set_global_steps(self, global_steps):
        return None


class ProbeWorker(Worker):
    """verl's actor-rollout worker, up to the GPU: config + role in, rollout adapter by name."""

    def __init__(self, config, role):
        super().__init__()
        self.config, self.role = config, role

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def init_model(self):
        return None

    @register(dispatch_mode=Dispatch.ONE_TO_ALL, blocking=False)  # verl's: the manager ray.get()s the refs
    def update_weights(self, global_steps=None, mode="auto"):
        """The adapter verl's registry gives this worker's rollout.name finds its server by name and
        records on it (instead of streaming tensors) the socket path it would send them on."""
        import ray
        from verl.utils.config import omega_conf_to_dataclass
        from verl.workers.rollout.base import get_rollout_class

        cfg = omega_conf_to_dataclass(self.config.rollout)
        adapter = get_rollout_class(cfg.name, cfg.mode)(config=cfg, model_config=SimpleNamespace(), device_mesh=None)
        me = ray.get_runtime_context().get_actor_id()
        if adapter._ensure_server_handle():  # verl's lookup: f"{rollout.name}_server_{replica}_{node}"
            ray.get(adapter.server_handle.record.remote(me, adapter.zmq_handle, global_steps))
        return {"worker": me, "zmq": adapter.zmq_handle, "adapter": type(adapter).__name__}


# Ray workers that unpickle these classes import this module first: give them vLLM's import surface too
if os.environ.get("ENVACE_TEST_FAKE_VLLM") == "1":
    install_vllm_import_surface()
