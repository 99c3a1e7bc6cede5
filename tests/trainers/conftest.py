"""Shared fixtures for trainer tests: a tiny random model built from the tool-world corpus, the same model
briefly SFT'd on Act demonstrations (so it makes tool calls), real training rows of both roles sampled
from it, a spy on the trajectories a training run scores, and `hand_role_grads`: each role's gradient of the
first-step PPO loss, computed row by row with plain full forwards (the slow, obvious version of the update)."""

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


@pytest.fixture(scope="session")
def hand_role_grads():
    """`grads(model, rows, weights=None, agg="token-mean") -> {role: flat gradient}`: each role's part of the
    gradient of the loss the update minimises at its first step, for one model over `rows` — per token
    -A * ratio (the rows are on-policy, so the ratio is 1 up to float error and no clip is active: checked),
    log-probs from one unpacked forward per row at the row's temperature; a row of role r weighs
    `weights[r]` (default 1) in the loss and in the denominator (token-mean: tokens; seq-mean-token-mean: rows).
    A role's gradient uses the denominator of all rows, so the roles' gradients add up to the loss's."""

    def grads(model, rows, weights=None, agg="token-mean"):
        from envace.engines.base import logprob_temperature

        weights = weights or {}
        params = [p for p in model.parameters() if p.requires_grad]
        w = [float(weights.get(r.role, 1.0)) for r in rows]
        den = sum(wi * (len(r.response_ids) if agg == "token-mean" else 1) for wi, r in zip(w, rows))
        model.train()
        out = {}
        for role in sorted({r.role for r in rows}, key=lambda x: x.value):
            total = 0.0
            for wi, r in zip(w, rows):
                if r.role is not role or wi == 0:
                    continue
                ids = torch.tensor([list(r.prompt_ids) + list(r.response_ids)])
                logits = model(input_ids=ids).logits[0, len(r.prompt_ids) - 1: -1].double()
                logp = torch.log_softmax(logits / logprob_temperature(r.temperature), dim=-1)
                lp = logp.gather(1, torch.tensor(r.response_ids).unsqueeze(1)).squeeze(1)
                ratio = torch.exp(lp - torch.tensor(r.old_logprobs, dtype=torch.float64))
                assert float((ratio.detach() - 1).abs().max()) < 0.1, "not on-policy: a PPO clip could be active"
                per_token = -r.advantage * ratio
                total = total + wi * (per_token.sum() if agg == "token-mean" else per_token.mean())
            if isinstance(total, float):
                out[role] = torch.cat([torch.zeros_like(p).flatten() for p in params])
                continue
            g = torch.autograd.grad(total / den, params, allow_unused=True)
            out[role] = torch.cat([(gi if gi is not None else torch.zeros_like(p)).flatten()
                                   for gi, p in zip(g, params)])
        return out

    return grads
