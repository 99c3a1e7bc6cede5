"""Shared fixtures for trainer tests: a tiny random model built from the tool-world corpus, the same model
briefly SFT'd on Act demonstrations (so it makes tool calls), real training rows of both roles sampled
from it, and a spy on the trajectories a training run scores."""

from __future__ import annotations

import shutil

import pytest
import torch


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    from envace.models.corpus import world_corpus
    from envace.models.tiny import TinyModelConfig, init_tiny_model

    torch.set_num_threads(1)
    cfg = TinyModelConfig(hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2, head_dim=16,
                          intermediate_size=128, vocab_size=700, seed=0)
    return init_tiny_model(world_corpus(120, seed=0), tmp_path_factory.mktemp("tiny") / "model", cfg)


@pytest.fixture(scope="session")
def act_sft_dir(tiny_model_dir, tmp_path_factory):
    """The tiny model after 150 Act-only SFT steps: it writes calls, valid ones some of the time (one SFT per
    session; the tests that use it share an xdist group, so it is built once per run)."""
    from envace.trainers.config import SFTConfig
    from envace.trainers.sft import sft

    out = tmp_path_factory.mktemp("sft_act")
    sft(SFTConfig(model=str(tiny_model_dir), out_dir=str(out), steps=150, batch_size=16, lr=3e-3, warmup_steps=10,
                  act_fraction=1.0, threads=1, progress=False, data={"n_tasks": 200}))
    return out / "model"


@pytest.fixture
def scored(monkeypatch):
    """Every trajectory the trainer scores (a spy around RewardScorer.score; the real scorer runs)."""
    from envace.trainers import rewarding

    seen = []
    real = rewarding.RewardScorer.score

    def spy(self, trajs):
        real(self, trajs)
        seen.extend(trajs)

    monkeypatch.setattr(rewarding.RewardScorer, "score", spy)
    return seen


@pytest.fixture
def fresh_copy(tmp_path):
    def copy(src):
        dst = tmp_path / "model_copy"
        shutil.copytree(src, dst)
        return dst
    return copy


@pytest.fixture(scope="session")
def role_rows(tiny_model_dir):
    """Rows of both roles, sampled by the real HF engine at two role temperatures (Act 1.0, Rehearse
    0.7) from prompts the rollout would build for gold calls of tool-world tasks."""
    from envace.engines.base import GenRequest
    from envace.engines.hf import HFEngine
    from envace.models.loading import load_policy
    from envace.roles.act import act_prompt_ids
    from envace.roles.rehearse import rehearse_messages, rehearse_prompt_ids
    from envace.trainers.train_rows import TrainRow
    from envace.types import Role
    from envace.worlds.generator import generate_tasks

    model, tok = load_policy(tiny_model_dir)
    engine = HFEngine(model, tok)
    tasks = generate_tasks(4, "train", 3)
    reqs, meta = [], []
    for p, task in enumerate(tasks):
        first_call_at = next(i for i, m in enumerate(task.messages) if m.tool_calls)
        act_ids = act_prompt_ids(tok, task.messages[:first_call_at], task.tools)
        call = task.messages[first_call_at].tool_calls[0]
        chat = rehearse_messages(task, task.messages[:first_call_at], "x", call, few_shot=True, style="compact")
        reh_ids = rehearse_prompt_ids(tok, chat)
        for s in range(2):
            reqs.append(GenRequest(act_ids, temperature=1.0, max_new_tokens=12, seed=100 * p + s))
            meta.append((Role.ACT, p, s, 1.0))
            reqs.append(GenRequest(reh_ids, temperature=0.7, max_new_tokens=12, seed=100 * p + s + 50))
            meta.append((Role.REHEARSE, p, s, 0.7))
    rows = []
    for req, res, (role, p, s, temp) in zip(reqs, engine.generate(reqs), meta):
        rows.append(TrainRow.standalone(role=role, prompt_ids=req.prompt_ids, response_ids=res.token_ids,
                                        old_logprobs=res.logprobs, temperature=temp, prompt_index=p,
                                        trajectory_key=s, reward=float(s)))
    return rows
