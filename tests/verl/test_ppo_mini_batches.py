"""PPO epochs x mini-batches on the verl backend: the launch config maps onto verl's own keys (composed
with verl's real Hydra config), and the envace trainer makes it exactly M optimizer steps per epoch
whatever the number of role-call rows (verl's actor worker group is a recording stand-in: it needs GPUs)."""

from __future__ import annotations

import contextlib

import pytest

from envace.config import ConfigError
from envace.trainers.verl.config import LoopSettings, VerlLaunchConfig

pytestmark = pytest.mark.verl


class _RecordingActorGroup:
    def __init__(self, config=None):
        self.seen = []
        self.config = config

    def update_actor(self, batch):
        info = dict(batch.extra_info)
        if self.config is not None:  # what verl's config says at the time of the call
            info["config_ppo_mini_batch_size"] = int(self.config.actor_rollout_ref.actor.ppo_mini_batch_size)
        self.seen.append(info)
        return {"metrics": {"mfu": [0.5], "pg_loss": [0.1]}}


def _trainer(config):
    from envace.trainers.verl.trainer import EnvaceTrainer

    trainer = object.__new__(EnvaceTrainer)  # __init__ would start Ray worker groups on GPUs
    trainer.config = config
    trainer.use_critic = False
    trainer.actor_rollout_wg = _RecordingActorGroup(config)
    # per-row temperatures read TransferQueue (test_role_temperatures.py); these tests are about mini-batches
    trainer._row_temperatures = lambda batch: contextlib.nullcontext()
    return trainer


def test_epochs_and_mini_batches_map_onto_verl_keys(verl_config_factory):
    c = verl_config_factory(train_batch_size=16, n=4, ppo_epochs=2, ppo_mini_batches=4)
    actor = c.actor_rollout_ref.actor
    assert (actor.ppo_epochs, actor.ppo_mini_batch_size, c.data.train_batch_size) == (2, 4, 16)
    assert LoopSettings.from_verl(c).ppo_mini_batches == 4
    default = verl_config_factory(train_batch_size=16)
    assert (default.actor_rollout_ref.actor.ppo_epochs, default.actor_rollout_ref.actor.ppo_mini_batch_size) == (1, 16)
    assert LoopSettings.from_verl(default).ppo_mini_batches == 1


@pytest.mark.parametrize("mini_batches, want_rows", [(1, 96), (4, 24)])
def test_trainer_takes_m_steps_per_epoch_whatever_the_row_count(verl_api, verl_config_factory, mini_batches,
                                                                 want_rows):
    from transfer_queue import KVBatchMeta

    config = verl_config_factory(train_batch_size=16, n=4, ppo_epochs=2, ppo_mini_batches=mini_batches)
    trainer = _trainer(config)
    # 96 role-call rows from 16 prompts x 4 samples: verl alone would cut them into 96 / (16/M x 4) pieces
    batch = KVBatchMeta(partition_id="train", keys=[f"u_{i}_0" for i in range(96)], tags=[{}] * 96)
    trainer._update_actor(batch, {})
    (seen,) = trainer.actor_rollout_wg.seen
    # verl's worker splits by its own num_mini_batch (it reads it only without mini_batch_size); verl's
    # config is never rewritten, during the call or after it
    assert "mini_batch_size" not in seen and seen["num_mini_batch"] == mini_batches
    assert seen["global_batch_size"] == want_rows and 96 // seen["global_batch_size"] == mini_batches
    assert seen["epochs"] == 2
    assert seen["config_ppo_mini_batch_size"] == 16 // mini_batches
    assert config.actor_rollout_ref.actor.ppo_mini_batch_size == 16 // mini_batches


def test_batches_are_padded_to_split_evenly(verl_api, verl_config_factory):
    trainer = _trainer(verl_config_factory(train_batch_size=16, n=4, ppo_mini_batches=4))
    # M x lcm(n, dp): 4 x lcm(4, 8) = 32 rows, so each of the 4 mini-batches is 2 x n-row units per 8 GPUs
    assert trainer._get_required_batch_multiple(8) == 32
    assert trainer._get_required_batch_multiple(1) == 16
    from transfer_queue import KVBatchMeta

    batch = KVBatchMeta(partition_id="train", keys=[f"u_{i}_0" for i in range(20)], tags=[{}] * 20)
    with pytest.raises(ValueError, match="20 rows are not a multiple of rollout.n x envace.ppo_mini_batches = 4 x 4"):
        trainer._update_actor(batch, {})


def test_bad_mini_batch_counts_name_the_field(tmp_path):
    base = dict(model="m", train_files=["t.parquet"], nnodes=1, n_gpus_per_node=1)
    with pytest.raises((ConfigError, ValueError), match="ppo_mini_batches = 3 does not divide train_batch_size = 16"):
        VerlLaunchConfig(**base, train_batch_size=16, ppo_mini_batches=3)
    with pytest.raises((ConfigError, ValueError), match="loop.ppo_mini_batches = 2 differs"):
        VerlLaunchConfig(**base, train_batch_size=16, ppo_mini_batches=4, loop={"ppo_mini_batches": 2})
