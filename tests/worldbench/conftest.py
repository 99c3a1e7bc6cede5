"""Worldbench behaviour-metric fixtures: the project's tiny model with a tokenizer trained on the tool-world
corpus (built as the trainer tests' `tiny_model_dir`, so tool-world prompts fit its 1,024-token context; the
chat-corpus `tiny_dir` spends over 1,024 tokens on one tool-world Act prompt) and real tool-world transitions
recorded by the worldbench builder."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(scope="session")
def world_tiny_dir(tmp_path_factory):
    from envace.models.corpus import world_corpus
    from envace.models.tiny import TinyModelConfig, init_tiny_model

    torch.set_num_threads(1)
    cfg = TinyModelConfig(hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2, head_dim=16,
                          intermediate_size=128, vocab_size=700, seed=0)
    return init_tiny_model(world_corpus(120, seed=0), tmp_path_factory.mktemp("wtiny") / "model", cfg)


@pytest.fixture(scope="session")
def world_transitions():
    """Every transition (gold and perturbed) of 4 train and 10 test tool-world tasks, as `build` records them."""
    from envace.worldbench.script import record_task
    from envace.worldbench.sources.world import world_scripts

    return [t for s in world_scripts(4, 10, 0) for t in record_task(s, 0)]


@pytest.fixture(scope="session")
def frozen(world_tiny_dir):
    from envace.worldbench.policy_scoring import FrozenPolicy

    return FrozenPolicy(world_tiny_dir, batch_size=4, device="cpu")
