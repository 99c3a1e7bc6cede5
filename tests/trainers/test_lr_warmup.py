"""RL learning-rate warm-up: linear over `optim.warmup_steps` RL steps, then constant; a run stopped at a
checkpoint and resumed follows the same lr curve and ends with the same weights as an uninterrupted one."""

from __future__ import annotations

import pytest
import torch

from envace.trainers.config import OptimConfig, TrainConfig
from envace.trainers.schedule import lr_at


def test_lr_by_hand():
    cfg = OptimConfig(lr=1e-3, warmup_steps=4)
    assert [lr_at(s, cfg) for s in range(1, 7)] == pytest.approx([2.5e-4, 5e-4, 7.5e-4, 1e-3, 1e-3, 1e-3])
    assert [lr_at(s, OptimConfig(lr=2e-4)) for s in (1, 50)] == [2e-4, 2e-4]  # warm-up off by default
    with pytest.raises(ValueError, match="1-based"):
        lr_at(0, cfg)
    with pytest.raises(ValueError, match="warmup_steps"):
        OptimConfig(warmup_steps=-1)


def _cfg(model_dir, out, steps):
    return TrainConfig.model_validate(dict(
        model=str(model_dir), out_dir=str(out), steps=steps, prompts_per_step=2, k=2, save_every=2, threads=1,
        progress=False, data={"n_tasks": 20}, optim={"lr": 1e-3, "warmup_steps": 3}, tracking={"enabled": False},
        rollout={"max_assistant_turns": 2, "act": {"max_new_tokens": 12}, "rehearse": {"max_new_tokens": 12}}))


def test_warmup_survives_a_resume(tiny_model_dir, tmp_path):
    from envace.models.loading import load_policy
    from envace.trainers.embedded import train

    full = train(_cfg(tiny_model_dir, tmp_path / "full", 4))
    assert [h["optim/lr"] for h in full.history] == pytest.approx([1e-3 / 3, 2e-3 / 3, 1e-3, 1e-3])
    first = train(_cfg(tiny_model_dir, tmp_path / "split", 2))  # stops after the step-2 checkpoint
    assert [h["optim/lr"] for h in first.history] == pytest.approx([1e-3 / 3, 2e-3 / 3])
    rest = train(_cfg(tiny_model_dir, tmp_path / "split", 4))  # resumes at step 3
    assert [h["step"] for h in rest.history] == [3, 4]
    assert [h["optim/lr"] for h in rest.history] == pytest.approx([1e-3, 1e-3])
    a, _ = load_policy(full.checkpoint / "policy")
    b, _ = load_policy(rest.checkpoint / "policy")
    start, _ = load_policy(tiny_model_dir)
    moved = False
    for (name, pa), pb, p0 in zip(a.named_parameters(), b.parameters(), start.parameters()):
        assert torch.equal(pa, pb), name
        moved |= not torch.equal(pa, p0)
    assert moved
