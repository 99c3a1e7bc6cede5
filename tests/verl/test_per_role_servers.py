"""policy=per_role through verl's own server plumbing: envace's trainer builds the Rehearse stack with
verl's real `LLMServerManager.create`, `vLLMReplica` (rank slicing of the worker group, server actor
names), `CheckpointEngineManager`, load balancer and client, on a CPU Ray cluster with 2 declared GPUs
(one replica per role).

Stand-ins (tests/verl/cpu_rollout.py): vLLM's import surface (verl's vLLM modules import it), the vLLM
server class (registered where verl's replica looks for it) and the FSDP worker (a real verl `Worker`
whose `update_weights` runs verl's worker-side adapter: server lookup by name, weight-sync socket path).
What the test holds: the Act and Rehearse replicas both start at rank 0 of their own worker groups;
every server is reached by exactly the workers it was launched with; every sender's socket path is the
one its server's engine would bind, and no two workers share one; the Rehearse client reaches only
Rehearse servers. A rank offset (empty worker slice), a shared name (duplicate Ray actor, or a Rehearse
worker finding an Act server) or a shared socket fails it.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

pytestmark = pytest.mark.verl
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def cpu_ray(verl_api):
    import cpu_rollout
    import ray

    from envace.trainers.verl import rollout_names

    env = {"PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests" / "verl"), os.environ.get("PYTHONPATH", "")]),
           "ENVACE_TEST_FAKE_VLLM": "1", "VERL_USE_EXTERNAL_MODULES": "envace.trainers.verl_plugin",
           "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    cpu_rollout.install_vllm_import_surface()
    try:  # the stand-in vllm is removed even when Ray does not start (later tests import the real absence)
        ray.init(num_cpus=16, num_gpus=2, include_dashboard=False, log_to_driver=False, logging_level="ERROR",
                 runtime_env={"env_vars": env})
        yield ray
    finally:
        ray.shutdown()
        for f in (rollout_names.replica_class, rollout_names.adapter_class, rollout_names.server_class):
            f.cache_clear()
        cpu_rollout.uninstall_vllm_import_surface()


def _act_stack(base, ray, worker_cls):
    """What verl's `_setup` builds for the Act role (steps 5, 9, 10 of trainer_base.py), on the CPU stand-ins."""

    def setup(self):
        self._init_resource_pool_mgr()
        self.resource_pool_manager.create_resource_pool()
        pool = self.resource_pool_manager.resource_pool_dict["global_pool"]
        role = str(base.Role.ActorRollout)
        worker = base.RayClassWithInitArgs(cls=ray.remote(worker_cls), config=self.config.actor_rollout_ref, role=role)
        group = base.RayWorkerGroup(resource_pool=pool,
                                    ray_cls_with_init=base.create_colocated_worker_cls(class_dict={role: worker}),
                                    device_name=self.config.trainer.device)
        self.actor_rollout_wg = group.spawn(prefix_set={role})[role]
        self.actor_rollout_wg.init_model()
        self.llm_server_manager = base.LLMServerManager.create(config=self.config, worker_group=self.actor_rollout_wg,
                                                               rollout_resource_pool=pool)
        engine = base.omega_conf_to_dataclass(self.config.actor_rollout_ref.rollout.checkpoint_engine)
        engine.backend = "naive"
        self.checkpoint_manager = base.CheckpointEngineManager(config=engine, actor_wg=self.actor_rollout_wg,
                                                               replicas=self.llm_server_manager.get_replicas())
        self.checkpoint_manager.sleep_replicas()
        self._load_checkpoint()

    return setup


@pytest.mark.slow  # Ray actors and both roles' servers (~50 s); tests/verl/test_per_role_verl.py is the quick form
def test_rehearse_servers_run_under_their_own_rollout_name(cpu_ray, verl_config_factory, monkeypatch):
    import cpu_rollout
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer
    from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync
    from verl.workers.rollout.vllm_rollout import vllm_async_server

    from envace.trainers.verl import trainer as envace_trainer
    from envace.trainers.verl.per_role import RoleClients
    from envace.trainers.verl.trainer import EnvaceTrainer

    ray, base = cpu_ray, envace_trainer._base
    monkeypatch.setattr(vllm_async_server, "vLLMHttpServer", cpu_rollout.CPUServer)  # where vLLMReplica looks
    monkeypatch.setattr(base, "ActorRolloutRefWorker", cpu_rollout.ProbeWorker)
    monkeypatch.setattr(PPOTrainerSync, "_setup", _act_stack(base, ray, cpu_rollout.ProbeWorker))
    monkeypatch.setattr(PPOTrainer, "_load_checkpoint", lambda self: None)

    config = verl_config_factory("trainer.n_gpus_per_node=1", policy="per_role")
    trainer = object.__new__(EnvaceTrainer)  # __init__ builds datasets and TransferQueue: not needed here
    trainer.config = config
    trainer._setup()

    act, rehearse = trainer.llm_server_manager, trainer.rehearse_llm_server_manager
    assert [r.replica_rank for r in act.get_replicas()] == [0]
    assert [r.replica_rank for r in rehearse.get_replicas()] == [0]  # each group's own ranks, not Act's + 1
    names = {a["name"] for a in ray.util.list_named_actors(all_namespaces=True)}
    assert {"vllm_server_0_0", "envace_rehearse_vllm_server_0_0"} <= names

    # verl's weight sync (naive backend) on both actors: each worker's adapter finds its server by name
    trainer.checkpoint_manager.update_weights(5)
    groups = {"act": (act, trainer.act_actor_wg), "rehearse": (rehearse, trainer.rehearse_actor_wg)}
    sockets, servers_of = [], {}
    for role, (manager, group) in groups.items():
        workers = [w._actor_id.hex() for w in group.workers]
        heard = []
        for replica in manager.get_replicas():
            seen = ray.get(replica.servers[0].seen.remote())
            synced = [s for s in seen["synced"] if "worker" in s]
            assert [s["worker"] for s in synced] == seen["worker_ids"], (role, seen)  # its own workers only
            assert [s["global_steps"] for s in synced] == [5]
            assert all(s["zmq"] == seen["receiver_zmq"] for s in synced), (role, seen)  # both ends agree
            heard += seen["worker_ids"]
            sockets += [s["zmq"] for s in synced]
            servers_of[replica.server_address] = role
        assert heard == workers  # the group's workers in rank order, one per replica
    assert len(set(sockets)) == len(sockets) == 2, sockets

    # the agent loop's client: Rehearse calls reach Rehearse servers only
    client = trainer.get_llm_client()
    assert isinstance(client, RoleClients)

    async def acquired(c, n):
        return [(await c._acquire_server(f"session-{i}"))[0] for i in range(n)]

    assert {servers_of[s] for s in asyncio.run(acquired(client.rehearse, 6))} == {"rehearse"}
    assert {servers_of[s] for s in asyncio.run(acquired(client.act, 6))} == {"act"}
