"""envace's V1 trainer (`trainer_mode=envace`) against verl's real TransferQueue on CPU.

The slow test starts a local Ray instance and a real TransferQueue (controller + one storage unit), has
verl's own V1 adapter (`AgentLoopWorkerTQ._agent_loop_postprocess`) store the agent loop's outputs as
rows, pads the batch with verl's own `upsample_batch_to_divisible_size`, and runs the trainer's
`_compute_advantage` on the resulting `KVBatchMeta`. The trainer object is built without `__init__`
(which starts GPU worker groups); `_compute_advantage` uses only its config.
"""

from __future__ import annotations

import asyncio
import contextlib

import pytest
import torch
from tensordict import TensorDict

from envace.algos import role_grpo_advantages
from envace.toolcall import render_tool_call
from envace.trainers.verl.config import LoopSettings

pytestmark = pytest.mark.verl

def bare_trainer(config):
    from envace.trainers.verl.trainer import EnvaceTrainer

    trainer = object.__new__(EnvaceTrainer)  # __init__ would start Ray worker groups on GPUs
    trainer.config = config
    return trainer


def _stored_batch(run_session, config, rl_dataset, world_tasks, tokenizer, scripted_server, tq):
    """Two sessions of one task stored by verl's own V1 adapter and padded to 8 rows by verl's padding."""
    from verl.trainer.ppo.padding_utils import upsample_batch_to_divisible_size
    from verl.trainer.ppo.v1.agent_loop_tq import AgentLoopWorkerTQ

    task = world_tasks[3]  # one user turn; the reference makes two calls in one Act message
    calls = task.messages[2].tool_calls
    # trajectory 0 follows the reference (R = 1); trajectory 1 makes one call and a wrong reply (R < 1)
    scripts = [None, [render_tool_call(calls[0]), "I could not find it."]]
    worker = object.__new__(AgentLoopWorkerTQ.__ray_actor_class__)  # verl's real V1 adapter, minus Ray
    worker.reward_loop_worker_handles, worker.distillation_enabled, worker.processor = None, False, None
    worker.tokenizer = tokenizer
    rewards, roles = {}, {}
    sample = rl_dataset[3]
    uid = f"uid{len(tq.kv_list('train').get('train', {}))}"  # a fresh prompt per call in this module
    for session, script in enumerate(scripts):
        outs = run_session(config, scripted_server(task, script), tokenizer, sample, session, uid=uid,
                           global_steps=1)
        for i, o in enumerate(outs):
            rewards[f"{uid}_{session}_{i}"], roles[f"{uid}_{session}_{i}"] = o.reward_score, o.extra_fields["role"]
        kwargs = {**sample, "uid": uid, "session_id": session, "global_steps": 1}
        asyncio.run(worker._agent_loop_postprocess(outs, False, **kwargs))
    assert rewards[f"{uid}_0_0"] == 1.0 and rewards[f"{uid}_1_0"] < 1.0
    assert [roles[f"{uid}_1_{i}"] for i in range(3)] == ["act", "rehearse", "act"]

    listed = tq.kv_list("train")["train"]
    keys = sorted(k for k in listed if k in rewards)
    batch = tq.KVBatchMeta(partition_id="train", keys=keys, tags=[listed[k] for k in keys])
    batch = upsample_batch_to_divisible_size(batch, 8, tokenizer.eos_token_id or 0)
    assert len(batch) == 8 and sum(bool(t.get("is_padding")) for t in batch.tags) == 8 - len(keys)

    # the pipeline's previous steps write old (and reference) log-probs (the actor's recomputation runs on
    # GPU workers; verl's bypass mode writes exactly this copy of the rollout log-probs)
    lp = tq.kv_batch_get(keys=batch.keys, partition_id="train", select_fields=["rollout_log_probs"])
    ref = torch.nested.nested_tensor([t - 0.1 for t in lp["rollout_log_probs"].unbind(0)], layout=torch.jagged)
    tq.kv_batch_put(keys=batch.keys, partition_id="train",
                    fields=TensorDict({"old_log_probs": lp["rollout_log_probs"], "ref_log_prob": ref},
                                      batch_size=len(batch)))
    return batch, keys, rewards, roles, uid


@pytest.mark.slow
def test_compute_advantage_through_transfer_queue(run_session, verl_config_factory, rl_dataset, world_tasks,
                                                  tokenizer, scripted_server, transfer_queue):
    from verl.trainer.ppo.v1 import trainer_base

    tq = transfer_queue
    config = verl_config_factory()
    batch, keys, rewards, roles, uid = _stored_batch(run_session, config, rl_dataset, world_tasks, tokenizer,
                                                     scripted_server, tq)
    verls = trainer_base.compute_advantage_for_multi_trajectories
    metrics: dict = {}
    bare_trainer(config)._compute_advantage(batch, metrics)
    assert trainer_base.compute_advantage_for_multi_trajectories is verls  # verl's grouping is back

    got = tq.kv_batch_get(keys=batch.keys, partition_id="train", select_fields=["advantages", "response_mask"])
    expected = role_grpo_advantages([rewards[k] for k in keys], [uid] * len(keys),
                                    [k.rsplit("_", 2)[1] for k in keys], [roles[k] for k in keys]).tolist()
    by_key = dict(zip(keys, expected))
    advs = got["advantages"].unbind(0)
    for key, adv in zip(batch.keys, advs):
        want = by_key.get(key, 0.0)  # padding rows: advantage 0
        assert torch.allclose(adv, torch.full_like(adv, want), atol=1e-6), (key, adv, want)
    # both roles were contrasted across the two trajectories
    assert any(abs(v) > 1e-6 for k, v in by_key.items() if roles[k] == "rehearse")
    assert metrics["envace/rows/act"] == sum(r == "act" for r in roles.values())


@pytest.mark.slow
def test_kl_in_reward_is_verls_own_step(run_session, verl_config_factory, rl_dataset, world_tasks, tokenizer,
                                        scripted_server, transfer_queue, monkeypatch):
    """algorithm.use_kl_in_reward: verl's step applies its KL penalty (the name its module calls) and writes
    token_level_rewards back; envace's grouping then sees the penalised rewards."""
    from verl.trainer.ppo import core_algos
    from verl.trainer.ppo.v1 import trainer_base

    tq = transfer_queue
    config = verl_config_factory("algorithm.use_kl_in_reward=true", "algorithm.kl_penalty=kl",
                                 "algorithm.kl_ctrl.kl_coef=0.5")
    batch, keys, rewards, roles, uid = _stored_batch(run_session, config, rl_dataset, world_tasks, tokenizer,
                                                     scripted_server, tq)
    seen = []
    verls_kl = trainer_base.apply_kl_penalty
    monkeypatch.setattr(trainer_base, "apply_kl_penalty", lambda *a, **k: seen.append(1) or verls_kl(*a, **k))
    trainer = bare_trainer(config)
    trainer.kl_ctrl_in_reward = core_algos.get_kl_controller(config.algorithm.kl_ctrl)
    metrics: dict = {}
    trainer._compute_advantage(batch, metrics)
    assert seen == [1] and "actor/reward_kl_penalty" in metrics

    got = tq.kv_batch_get(keys=batch.keys, partition_id="train",
                          select_fields=["token_level_rewards", "rm_scores", "advantages", "response_mask"])
    penalised = {}
    for key, r, score, mask in zip(batch.keys, got["token_level_rewards"].unbind(0), got["rm_scores"].unbind(0),
                                   got["response_mask"].unbind(0)):
        # kl penalty "kl": old - ref = 0.1 on every response token, times beta 0.5 (verl masks padding rows' tokens)
        assert torch.allclose(r, score - 0.5 * 0.1 * mask.to(score.dtype), atol=1e-5), key
        penalised[key] = float(r.sum())
    assert all(penalised[k] < rewards[k] for k in keys)  # the penalty reached every real row
    expected = role_grpo_advantages([penalised[k] for k in keys], [uid] * len(keys),
                                    [k.rsplit("_", 2)[1] for k in keys], [roles[k] for k in keys]).tolist()
    for key, adv in zip(batch.keys, got["advantages"].unbind(0)):
        want = dict(zip(keys, expected)).get(key, 0.0)
        assert torch.allclose(adv, torch.full_like(adv, want), atol=1e-5), (key, adv, want)


class _StubActorGroup:
    """Stands in for verl's actor worker group (FSDP workers on GPUs): records what update_actor gets."""

    def __init__(self):
        self.seen = []

    def update_actor(self, batch):
        self.seen.append(dict(batch.extra_info))
        return {"metrics": {"mfu": [0.5], "pg_loss": [0.1]}}


@pytest.mark.parametrize("single_update, want_rows", [(True, 96), (False, 16 * 4)])
def test_one_optimizer_step_per_training_step(verl_api, verl_config_factory, single_update, want_rows):
    from transfer_queue import KVBatchMeta

    config = verl_config_factory(loop=LoopSettings(single_update=single_update))
    trainer = bare_trainer(config)
    trainer.actor_rollout_wg = _StubActorGroup()
    # per-row temperatures read TransferQueue (test_role_temperatures.py); this test is about mini-batches
    trainer._row_temperatures = lambda batch: contextlib.nullcontext()
    batch = KVBatchMeta(partition_id="train", keys=[f"u_{i}_0" for i in range(96)], tags=[{}] * 96)
    metrics: dict = {}
    trainer._update_actor(batch, metrics)
    (seen,) = trainer.actor_rollout_wg.seen
    if single_update:  # the worker's own num_mini_batch: 1 mini-batch of all 96 rows, verl's config untouched
        assert "mini_batch_size" not in seen and seen["num_mini_batch"] == 1 and seen["global_batch_size"] == 96
    else:
        assert seen["mini_batch_size"] == seen["global_batch_size"] == want_rows
    assert config.actor_rollout_ref.actor.ppo_mini_batch_size == 16
    assert metrics["perf/mfu/actor"] == pytest.approx(0.5)


def test_other_estimators_use_verls_step(verl_api, verl_config_factory, monkeypatch):
    from types import SimpleNamespace

    from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync

    from envace.trainers.verl import trainer as trainer_module

    class StandInQueue:  # the unscored check reads each row's extra_fields first (tests/verl/test_unscored_stop.py)
        def kv_batch_get(self, *, keys, partition_id, select_fields):
            return {"extra_fields": SimpleNamespace(tolist=lambda: [{"envace_scored": True}] * len(keys))}

    monkeypatch.setattr(trainer_module, "_tq", StandInQueue())
    called = []
    monkeypatch.setattr(PPOTrainerSync, "_compute_advantage", lambda self, b, m: called.append(b) or b)
    trainer = bare_trainer(verl_config_factory(adv_estimator="grpo"))
    batch = SimpleNamespace(keys=["u_0_0", "u_1_0"], partition_id="train", tags=[{}, {}])
    metrics: dict = {}
    assert trainer._compute_advantage(batch, metrics) is batch and called == [batch]
    assert metrics["envace/episodes/unscored_share"] == 0.0  # the stop rule ran before verl's own step


def test_trainer_is_registered(verl_api):
    from verl.trainer.ppo.v1 import PPOTrainerSync, get_trainer_cls

    from envace.trainers.verl.trainer import EnvaceTrainer

    assert get_trainer_cls("envace") is EnvaceTrainer and issubclass(EnvaceTrainer, PPOTrainerSync)
