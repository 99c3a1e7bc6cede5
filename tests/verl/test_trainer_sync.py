"""The envace trainer runs verl's sync path, and its steps and epochs come from the rows verl keeps.

verl's own `PPOTrainer.__init__` and `_init_dataloader` run on verl's composed config, the tool-world
parquet and a real tokenizer (conftest): the replay buffer verl builds, the dataloader batch size, the
mode verl's checkpoint branches read, and the epochs after verl's overlong-prompt filter.
"""

from __future__ import annotations

import math

import pytest

pytestmark = pytest.mark.verl


def _built(config):
    from envace.trainers.verl.trainer import EnvaceTrainer

    return EnvaceTrainer(config)  # verl's own __init__: config checks, replay buffer (no Ray, no GPU)


def test_envace_mode_is_verls_sync_path(verl_api, verl_config_factory):
    from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer, ReplayBufferAsync
    from verl.trainer.ppo.v1.trainer_base import get_trainer_cls

    from envace.trainers.verl.trainer import EnvaceTrainer

    config = verl_config_factory()
    assert config.trainer.v1.trainer_mode == "envace" and get_trainer_cls("envace") is EnvaceTrainer
    trainer = _built(config)
    # verl's branches on `self.trainer_mode != "sync"`: replay buffer, gen_batch_size, TransferQueue checkpoints
    assert trainer.trainer_mode == "sync"
    assert type(trainer.replay_buffer) is ReplayBuffer and not isinstance(trainer.replay_buffer, ReplayBufferAsync)
    assert trainer.replay_buffer.trainer_mode == "sync"


def _with_data(verl_config_factory, tokenizer, *extra, **launch):
    trainer = _built(verl_config_factory(*extra, **launch))
    trainer.tokenizer, trainer.processor = tokenizer, None
    return trainer


def test_epochs_reach_the_configured_steps(verl_api, verl_config_factory, tokenizer, world_tasks):
    trainer = _with_data(verl_config_factory, tokenizer, "data.dataloader_num_workers=0", train_batch_size=4,
                         total_training_steps=7, total_epochs=1)
    trainer._init_dataloader()  # verl's, then envace's reconciliation
    rows = len(trainer.train_dataset)
    assert rows == len(world_tasks) == 12  # nothing is over max_prompt_length here
    assert trainer.train_dataloader.batch_size == 4  # verl's sync path: no gen_batch_size=1 forcing
    assert trainer.config.data.get("gen_batch_size") is None
    assert trainer.steps_per_epoch == 3 and trainer.total_training_steps == 7
    # 7 steps of 3 per epoch: verl's loop (epoch < total_epochs) needs 3 epochs, not the configured 1
    assert trainer.config.trainer.total_epochs == math.ceil(7 / 3) == 3
    assert trainer.steps_per_epoch * trainer.config.trainer.total_epochs >= trainer.total_training_steps


def test_epochs_are_kept_when_they_already_reach(verl_api, verl_config_factory, tokenizer):
    trainer = _with_data(verl_config_factory, tokenizer, "data.dataloader_num_workers=0", train_batch_size=4,
                         total_training_steps=5, total_epochs=2)
    trainer._init_dataloader()
    assert trainer.config.trainer.total_epochs == 2  # 3 x 2 >= 5


def _prompt_lengths(parquet_path, tokenizer) -> list[int]:
    """Each row's first-prompt length as verl's filter measures it (chat template, generation prompt)."""
    import pandas as pd

    out = []
    for prompt in pd.read_parquet(parquet_path)["prompt"]:
        ids = tokenizer.apply_chat_template([dict(m) for m in prompt], add_generation_prompt=True, tokenize=True)
        out.append(len(ids["input_ids"] if hasattr(ids, "keys") else ids))
    return out


def test_epochs_come_from_the_rows_left_after_filtering(verl_api, verl_config_factory, tokenizer, parquet_path):
    lengths = _prompt_lengths(parquet_path, tokenizer)
    cut = sorted(lengths)[len(lengths) // 2]  # about half the rows are longer than this
    kept = sum(n <= cut for n in lengths)
    assert 4 <= kept < len(lengths)
    trainer = _with_data(verl_config_factory, tokenizer, "data.dataloader_num_workers=0",
                         f"data.max_prompt_length={cut}", train_batch_size=4, total_training_steps=5)
    trainer._init_dataloader()
    assert len(trainer.train_dataset) == kept  # verl's filter, counted here independently
    assert trainer.config.trainer.total_epochs == math.ceil(5 / (kept // 4))


def test_too_few_rows_after_filtering_stop_with_the_file_named(verl_api, verl_config_factory, tokenizer, parquet_path):
    shortest = min(_prompt_lengths(parquet_path, tokenizer))
    trainer = _with_data(verl_config_factory, tokenizer, "data.dataloader_num_workers=0",
                         f"data.max_prompt_length={shortest - 1}", train_batch_size=4)  # verl's filter leaves none
    with pytest.raises(ValueError, match=r"0 training rows left after verl's overlong-prompt filter") as err:
        trainer._init_dataloader()
    assert str(parquet_path) in str(err.value) and "train_batch_size=4" in str(err.value)
    big = _with_data(verl_config_factory, tokenizer, "data.dataloader_num_workers=0", train_batch_size=16)
    with pytest.raises(ValueError, match=r"12 training rows .* cannot fill one batch of data.train_batch_size=16"):
        big._init_dataloader()


def test_reconcile_epochs_by_hand():
    from envace.trainers.verl.schedule import reconcile_epochs

    # 7520 rows / 16 = 470 steps per epoch: the paper's 470 steps in 1 epoch
    assert reconcile_epochs(rows=7520, batch_size=16, steps=470, epochs=1) == 1
    # 7000 rows (filtered): 437 steps per epoch, 470 steps need 2 epochs
    assert reconcile_epochs(rows=7000, batch_size=16, steps=470, epochs=1) == 2
    assert reconcile_epochs(rows=7000, batch_size=16, steps=None, epochs=3) == 3
    with pytest.raises(ValueError, match="a.parquet: 15 training rows"):
        reconcile_epochs(rows=15, batch_size=16, steps=470, epochs=1, files=["a.parquet"])
