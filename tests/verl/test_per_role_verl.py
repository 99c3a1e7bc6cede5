"""policy=per_role on verl: the Rehearse role's own actor, replicas and weight sync, each actor computing
and updating only its own role's rows, on verl's real Hydra config, TransferQueue and trainer methods.

Real pieces: the launcher's composition; verl's `_init_resource_pool_mgr`; two tiny models (Act and a
perturbed copy for Rehearse) behind the CPU stand-in of verl's FSDP worker group (`_EngineWorkers`, see
test_role_temperatures.py) reading rows stored by verl's own V1 adapter in a real TransferQueue; verl's
own `_compute_old_log_prob`, `_update_actor`, `_balance_batch` (padding by verl's
`upsample_batch_to_divisible_size`); the envace agent loop with scripted servers (conftest).
Stand-ins: verl's Ray worker groups, vLLM replicas and weight sync (`_setup`'s test records what is
built on which pool); they need GPUs. Only a GPU cluster runs them.
"""

from __future__ import annotations

import copy
import os
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from test_role_temperatures import (  # noqa: F401
    ACT_T,
    REHEARSE_T,
    _EngineWorkers,
    embedded_logprobs,
    fetch,
    sampled_rows,
    store_rows,
    tiny_policy,
)

from envace.config import load_config
from envace.trainers.verl.config import LoopSettings, VerlLaunchConfig
from envace.trainers.verl.launcher import build_overrides, compose_verl_config

pytestmark = pytest.mark.verl
EXAMPLE = Path(__file__).resolve().parents[2] / "configs" / "verl" / "qwen3_8b_cm2.yaml"


@pytest.fixture(scope="module")
def per_role_cfg() -> VerlLaunchConfig:
    return load_config(VerlLaunchConfig, EXAMPLE, ["policy=per_role"])


def test_per_role_composes_into_the_envace_section(per_role_cfg):
    overrides = build_overrides(per_role_cfg)
    assert "+envace.policy=per_role" in overrides
    composed = compose_verl_config(overrides)
    assert LoopSettings.from_verl(composed).policy == "per_role"
    shared = compose_verl_config(build_overrides(per_role_cfg.model_copy(update={"policy": "shared"})))
    assert LoopSettings.from_verl(shared).policy == "shared"


def test_cli_dry_run_composes_and_states_the_gpu_cost(capsys, per_role_cfg):
    from envace.trainers.verl.launcher import main

    assert main([str(EXAMPLE), "policy=per_role", "--dry-run", "--show-config"]) == 0
    out = capsys.readouterr().out
    assert "+envace.policy=per_role" in out and "policy: per_role" in out  # the composed verl config
    assert "# verl validate_config: ok" in out
    assert "# rollout names: act=vllm (servers vllm_server_<replica>_<node>), rehearse=envace_rehearse_vllm" in out
    pool = per_role_cfg.nnodes * per_role_cfg.n_gpus_per_node
    assert f"= {pool} GPUs" in out and f"needs {2 * pool} GPUs" in out


def test_loop_and_top_level_policy_must_agree():
    with pytest.raises(ValueError, match="set only the top-level policy"):
        VerlLaunchConfig(model="m", train_files=["x"], loop=LoopSettings(policy="per_role"))


def _trainer(config, **attrs):
    from envace.trainers.verl.trainer import EnvaceTrainer

    trainer = object.__new__(EnvaceTrainer)  # __init__ would start Ray worker groups on GPUs
    trainer.config = config
    for k, v in attrs.items():
        setattr(trainer, k, v)
    return trainer


def test_rehearse_pool_is_as_large_as_verls(verl_api, verl_config_factory):
    from envace.trainers.verl.per_role import REHEARSE_POOL

    config = verl_config_factory("trainer.nnodes=2", "trainer.n_gpus_per_node=4", policy="per_role")
    trainer = _trainer(config)
    trainer._init_resource_pool_mgr()  # verl's own, then envace's pool
    spec = trainer.resource_pool_manager.resource_pool_spec
    assert spec[REHEARSE_POOL] == spec["global_pool"] == [4, 4]
    assert trainer.resource_pool_manager.get_n_gpus() == 16  # verl's throughput metrics count both pools
    shared = _trainer(verl_config_factory("trainer.nnodes=2", "trainer.n_gpus_per_node=4"))
    shared._init_resource_pool_mgr()
    assert REHEARSE_POOL not in shared.resource_pool_manager.resource_pool_spec


class _Recorder:
    """Records calls; stands in for verl's GPU-side classes in the setup test."""

    def __init__(self, name, log, **attrs):
        self.name, self.log = name, log
        self.__dict__.update(attrs)

    def __getattr__(self, method):
        def call(*args, **kwargs):
            self.log.append((self.name, method, args, kwargs))
            return None
        return call


def test_setup_builds_the_rehearse_actor_then_loads_both(verl_api, verl_config_factory, monkeypatch):
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer
    from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync

    from envace.trainers.verl import trainer as envace_trainer
    from envace.trainers.verl.per_role import REHEARSE_POOL, PairedCheckpointManagers, RoleClients, RoleGroups

    base = envace_trainer._base
    log: list = []
    pools = {"global_pool": "POOL-A", REHEARSE_POOL: "POOL-R"}
    act_client, rehearse_client = SimpleNamespace(config="cfg"), SimpleNamespace(config="cfg")

    def verls_setup(self):  # what verl's _setup leaves behind (Act stack), ending with its checkpoint load
        self.resource_pool_manager = SimpleNamespace(resource_pool_dict=pools)
        self.actor_rollout_wg = self.ref_policy_wg = _Recorder("act_wg", log)
        self.llm_server_manager = SimpleNamespace(get_replicas=lambda: ["r0", "r1"], get_client=lambda: act_client)
        self.checkpoint_manager = _Recorder("act_sync", log)
        self._load_checkpoint()

    loads = []
    monkeypatch.setattr(PPOTrainerSync, "_setup", verls_setup)
    monkeypatch.setattr(PPOTrainer, "_load_checkpoint", lambda self: loads.append(self.actor_rollout_wg))

    class Group:
        def __init__(self, resource_pool, ray_cls_with_init, **kw):
            log.append(("RayWorkerGroup", resource_pool, kw))

        def spawn(self, prefix_set):
            return {p: _Recorder("rehearse_wg", log) for p in prefix_set}

    def create(**kwargs):
        log.append(("LLMServerManager.create", kwargs))
        return SimpleNamespace(get_replicas=lambda: ["r2", "r3"], get_client=lambda: rehearse_client)

    monkeypatch.setattr(base, "RayWorkerGroup", Group)
    monkeypatch.setattr(base.LLMServerManager, "create", staticmethod(create))
    monkeypatch.setattr(base, "CheckpointEngineManager", lambda **kw: _Recorder("rehearse_sync", log, kw=kw))

    trainer = _trainer(verl_config_factory(policy="per_role"))
    trainer._setup()

    assert ("RayWorkerGroup", "POOL-R", {"device_name": trainer.config.trainer.device}) in log
    assert ("rehearse_wg", "init_model", (), {}) in log
    (created,) = [e[1] for e in log if e[0] == "LLMServerManager.create"]
    # the Rehearse stack's own rollout name, replicas from rank 0 of its own group (test_per_role_servers.py
    # runs this through verl's real LLMServerManager.create)
    assert created["rollout_resource_pool"] == "POOL-R" and "start_rank" not in created
    assert created["config"].actor_rollout_ref.rollout.name == "envace_rehearse_vllm"
    assert trainer.config.actor_rollout_ref.rollout.name == "vllm"  # the Act stack's is verl's own
    assert created["worker_group"] is trainer.rehearse_actor_wg
    assert ("rehearse_sync", "sleep_replicas", (), {}) in log
    # checkpoints loaded once, after the Rehearse actor exists, through both actors
    assert len(loads) == 1 and isinstance(loads[0], RoleGroups)
    assert loads[0].groups == {"act": trainer.act_actor_wg, "rehearse": trainer.rehearse_actor_wg}
    assert trainer.actor_rollout_wg is trainer.act_actor_wg  # restored
    # verl's weight sync reaches both actors' replicas
    assert isinstance(trainer.checkpoint_manager, PairedCheckpointManagers)
    del log[:]
    trainer.checkpoint_manager.update_weights(7)
    assert [(n, m, a) for n, m, a, _ in log] == [("act_sync", "update_weights", (7,)),
                                                 ("rehearse_sync", "update_weights", (7,))]
    client = trainer.get_llm_client()
    assert isinstance(client, RoleClients) and client.act is act_client and client.rehearse is rehearse_client


class _RoleWorkers(_EngineWorkers):
    """The CPU worker stand-in, also recording which rows each call got."""

    def __init__(self, model):
        super().__init__(model)
        self.keys: list[list[str]] = []
        self._dispatch_info = {"actor": [0]}

    def compute_log_prob(self, batch):
        self.keys.append(list(batch.keys))
        return super().compute_log_prob(batch)

    def update_actor(self, batch):
        self.keys.append(list(batch.keys))
        super().update_actor(batch)
        return {"metrics": {"mfu": [0.5], "pg_loss": [float(len(batch))]}}


@pytest.fixture(scope="module")
def two_models(tiny_policy):  # noqa: F811 -- the imported pytest fixture, requested by name
    model, tok = tiny_policy
    rehearse = copy.deepcopy(model)
    gen = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for p in rehearse.parameters():
            p.add_(0.2 * torch.randn(p.shape, generator=gen))
    return model, rehearse, tok


def _per_role_trainer(verl_config_factory, act, rehearse, *extra, **launch):
    from envace.trainers.verl.config import RoleSampling

    config = verl_config_factory(*extra, policy="per_role", loop=LoopSettings(
        act=RoleSampling(temperature=ACT_T), rehearse=RoleSampling(temperature=REHEARSE_T)), **launch)
    return _trainer(config, act_actor_wg=act, actor_rollout_wg=act, ref_policy_wg=act, rehearse_actor_wg=rehearse,
                    ref_in_actor=False, global_steps=1, use_critic=False)


def test_old_logprobs_come_from_each_roles_own_model(verl_api, verl_config_factory, two_models, sampled_rows,  # noqa: F811
                                                     transfer_queue):
    act_model, rehearse_model, tok = two_models
    rows = sampled_rows
    batch = store_rows(rows, tok, "perrole")
    act, rehearse = _RoleWorkers(act_model), _RoleWorkers(rehearse_model)
    trainer = _per_role_trainer(verl_config_factory, act, rehearse)
    metrics: dict = {}
    trainer._compute_old_log_prob(batch, metrics)

    is_act = [r.role.value == "act" for r in rows]
    assert act.keys == [[k for k, a in zip(batch.keys, is_act) if a]]
    assert rehearse.keys == [[k for k, a in zip(batch.keys, is_act) if not a]]
    by_act = embedded_logprobs(act_model, rows, tok.pad_token_id)
    by_rehearse = embedded_logprobs(rehearse_model, rows, tok.pad_token_id)
    for i, got in enumerate(fetch(batch, "old_log_probs")):
        want, other = (by_act[i], by_rehearse[i]) if is_act[i] else (by_rehearse[i], by_act[i])
        assert torch.allclose(got, want, rtol=1e-4, atol=1e-4), (i, got, want)
        assert float((got - other).abs().max()) > 1e-2  # the other model's values are far off: the check can fail
    # each role's rows still at their own sampling temperature (Act 1.0, Rehearse 0.01)
    assert torch.equal(act.temperatures[-1], torch.full((sum(is_act),), ACT_T))
    assert torch.equal(rehearse.temperatures[-1], torch.full((len(rows) - sum(is_act),), REHEARSE_T))
    assert trainer.actor_rollout_wg is act  # restored


@pytest.mark.parametrize("mini_batches", [1, 2])
def test_each_actor_updates_on_its_rows_with_its_own_mini_batches(verl_api, verl_config_factory, two_models,
                                                                  sampled_rows, transfer_queue, mini_batches):  # noqa: F811
    act_model, rehearse_model, tok = two_models
    batch = store_rows(sampled_rows, tok, f"upd{mini_batches}")  # 4 Act + 4 Rehearse rows
    act, rehearse = _RoleWorkers(act_model), _RoleWorkers(rehearse_model)
    trainer = _per_role_trainer(verl_config_factory, act, rehearse, "actor_rollout_ref.rollout.n=1",
                                ppo_mini_batches=mini_batches)
    metrics: dict = {}
    trainer._update_actor(batch, metrics)
    (act_update,), (rehearse_update,) = act.updates, rehearse.updates
    assert len(act.keys[0]) == len(rehearse.keys[0]) == 4
    assert set(act.keys[0]).isdisjoint(rehearse.keys[0])
    for update in (act_update, rehearse_update):  # 1/M of the role's own 4 rows per optimizer step
        assert "mini_batch_size" not in update and update["num_mini_batch"] == mini_batches
        assert update["global_batch_size"] == 4 // mini_batches
    assert metrics["actor/act/pg_loss"] == 4.0 and metrics["actor/rehearse/pg_loss"] == 4.0
    assert metrics["perf/mfu/actor"] == pytest.approx(0.5)


def test_each_role_is_padded_and_balanced_on_its_own(verl_api, verl_config_factory, two_models, sampled_rows,  # noqa: F811
                                                     transfer_queue):
    from envace.trainers.verl.per_role import batch_roles

    act_model, rehearse_model, tok = two_models
    rows = [r for r in sampled_rows if r.role.value == "act"][:3] + \
        [r for r in sampled_rows if r.role.value == "rehearse"]  # 3 Act + 4 Rehearse
    batch = store_rows(rows, tok, "balance")
    act, rehearse = _RoleWorkers(act_model), _RoleWorkers(rehearse_model)
    act._dispatch_info = {"actor": [0, 1]}  # two data-parallel ranks
    trainer = _per_role_trainer(verl_config_factory, act, rehearse, "actor_rollout_ref.rollout.n=1")
    trainer.tokenizer = tok
    metrics: dict = {}
    out = trainer._balance_batch(batch, metrics)
    roles = batch_roles(out)
    padding = [bool(t.get("is_padding", False)) for t in out.tags]
    # Act 3 -> 4 (one padding row, itself an Act row), Rehearse 4 -> 4; parts contiguous
    assert roles == ["act"] * 4 + ["rehearse"] * 4
    assert sum(padding[:4]) == 1 and sum(padding[4:]) == 0
    assert sorted(k for k, p in zip(out.keys, padding) if not p) == sorted(batch.keys)
    for role in ("act", "rehearse"):  # verl's balance metrics, per role
        assert any(k.startswith(f"global_seqlen/{role}/") for k in metrics), sorted(metrics)


def test_checkpoints_go_beside_verls_actor(tmp_path):
    from envace.trainers.verl.per_role import RoleGroups

    log: list = []
    groups = RoleGroups({"act": _Recorder("act", log), "rehearse": _Recorder("rehearse", log)}, lambda b: [])
    step = tmp_path / "global_step_5"
    groups.save_checkpoint(str(step / "actor"), None, 5, max_ckpt_to_keep=2)
    assert [(n, m, a[0]) for n, m, a, _ in log] == [("act", "save_checkpoint", str(step / "actor")),
                                                    ("rehearse", "save_checkpoint", str(step / "rehearse_actor"))]
    with pytest.raises(FileNotFoundError, match="rehearse_actor"):
        groups.load_checkpoint(str(step / "actor"))
    os.makedirs(step / "rehearse_actor")
    del log[:]
    groups.load_checkpoint(str(step / "actor"), del_local_after_load=False)
    assert [(n, kw["local_path"]) for n, _, _, kw in log] == [("act", str(step / "actor")),
                                                               ("rehearse", str(step / "rehearse_actor"))]


def test_rows_without_a_role_are_refused():
    from envace.trainers.verl.per_role import row_roles

    with pytest.raises(ValueError, match="row 'k1'.*envace_agent"):
        row_roles([{"role": "act"}, {}], ["k0", "k1"])


def test_agent_loop_sends_rehearse_calls_to_the_rehearse_servers(run_session, verl_config_factory, rl_dataset,
                                                                  world_tasks, tokenizer, scripted_server):
    from envace.trainers.verl.per_role import RoleClients

    config = verl_config_factory(policy="per_role")
    sample = rl_dataset[0]
    act_server, rehearse_server = scripted_server(world_tasks[0]), scripted_server(world_tasks[0])
    act_server.config = config
    rows = run_session(config, RoleClients(act_server, rehearse_server), tokenizer, sample)
    assert act_server.calls and rehearse_server.calls
    assert {c["kind"] for c in act_server.calls} == {"act"}
    assert {c["kind"] for c in rehearse_server.calls} == {"rehearse"}
    roles = [r.extra_fields["role"] for r in rows]
    assert roles.count("act") == len(act_server.calls) and roles.count("rehearse") == len(rehearse_server.calls)
    # without envace's trainer the client has no Rehearse servers: refused with the fix named
    with pytest.raises(ValueError, match="trainer_mode=envace"):
        run_session(config, scripted_server(world_tasks[0]), tokenizer, sample)
