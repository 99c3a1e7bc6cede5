"""`algo.advantage=role_moving_average` in the embedded trainer end to end: each step's rows are measured
against the per-role moving average of the earlier steps' mean rewards (recomputed here from the run's own
logged role rewards), the average is saved in every checkpoint, and a resumed run continues with the same
baseline and ends with the same weights as an uninterrupted one.

The policy is the conftest's Act-SFT'd tiny model under the toy reward (its first call names get_balance),
which it earns some of the time, so the role means differ from step to step."""

from __future__ import annotations

import json

import pytest
import torch

from envace.trainers.config import TrainConfig
from envace.trainers.embedded import BASELINE_META, train

DECAY = 0.8


def _cfg(model_dir, out, steps, advantage="role_moving_average"):
    return TrainConfig.model_validate(dict(
        model=str(model_dir), out_dir=str(out), steps=steps, prompts_per_step=3, k=4, save_every=2, threads=1,
        progress=False, seed=1, data={"n_tasks": 40}, reward="toy", shadow_monitor=False, tracking={"enabled": False},
        toy_reward={"kind": "first_call_tool", "target": "get_balance"},
        algo={"advantage": advantage, "baseline_decay": DECAY},
        rollout={"max_assistant_turns": 2, "act": {"max_new_tokens": 28}, "rehearse": {"max_new_tokens": 24}}))


def _expected(history, start=None):
    """Per step, {role: the baseline its rows should get}, from the logged per-role mean rewards: the earlier
    steps' average, or the step's own mean for a role not seen before (then the average moves)."""
    b = dict(start or {})
    out = []
    for h in history:
        used = {}
        for role in ("act", "rehearse"):
            if h[f"{role}/rows"] == 0:
                continue
            m = h[f"{role}/reward"]
            used[role] = b.get(role, m)
            b[role] = DECAY * b[role] + (1 - DECAY) * m if role in b else m
        out.append(used)
    return out, b


def test_each_step_is_measured_against_the_earlier_steps_average(act_sft_dir, tmp_path):
    hist = train(_cfg(act_sft_dir, tmp_path / "run", 4)).history
    act_means = [h["act/reward"] for h in hist]
    assert len(set(act_means)) > 1 and max(act_means) > 0  # the role means move: the average carries something
    expected, _ = _expected(hist)
    carried = 0
    for h, used in zip(hist, expected):
        assert {k.split("/")[1]: v for k, v in h.items() if k.startswith("baseline/")} == pytest.approx(used,
                                                                                                       abs=1e-6)
        for role, b in used.items():
            # every row is scored (toy reward): the mean advantage is the role's mean reward minus its baseline
            assert h[f"{role}/adv_mean"] == pytest.approx(h[f"{role}/reward"] - b, abs=1e-6)
            carried += abs(h[f"{role}/reward"] - b) > 1e-3
    assert carried  # some step's baseline differs from its own batch mean (else GRPO-like centring could pass)


def test_resume_continues_with_the_same_baseline(act_sft_dir, tmp_path):
    from envace.models.loading import load_policy

    full = train(_cfg(act_sft_dir, tmp_path / "full", 4))
    first = train(_cfg(act_sft_dir, tmp_path / "split", 2))  # stops after the step-2 checkpoint
    meta = json.loads((first.checkpoint / "meta.json").read_text())
    _, after_two = _expected(full.history[:2])
    assert meta[BASELINE_META]["values"] == pytest.approx(after_two, abs=1e-6)
    assert meta[BASELINE_META]["decay"] == DECAY
    rest = train(_cfg(act_sft_dir, tmp_path / "split", 4))  # resumes at step 3 from that checkpoint
    assert [h["step"] for h in rest.history] == [3, 4]
    for a, b in zip(full.history[2:], rest.history):
        assert {k: v for k, v in a.items() if k.startswith(("baseline/", "act/adv", "rehearse/adv"))} == {
            k: v for k, v in b.items() if k.startswith(("baseline/", "act/adv", "rehearse/adv"))}
    assert _expected(rest.history, start=after_two)[0] == pytest.approx(_expected(full.history)[0][2:], abs=1e-6)
    ends = [json.loads((r.checkpoint / "meta.json").read_text())[BASELINE_META] for r in (full, rest)]
    assert ends[0] == ends[1]
    for (name, pa), pb in zip(load_policy(full.checkpoint / "policy")[0].named_parameters(),
                              load_policy(rest.checkpoint / "policy")[0].parameters()):
        assert torch.equal(pa, pb), name


def test_a_checkpoint_without_a_baseline_restarts_it_with_a_warning(act_sft_dir, tmp_path):
    out = tmp_path / "run"
    grpo = train(_cfg(act_sft_dir, out, 2, advantage="role_grpo"))
    assert BASELINE_META not in json.loads((grpo.checkpoint / "meta.json").read_text())
    with pytest.warns(UserWarning, match="holds no role_baseline.*restarts from step 3's batch mean"):
        rest = train(_cfg(act_sft_dir, out, 3))
    (h,) = rest.history
    assert h["baseline/act"] == pytest.approx(h["act/reward"], abs=1e-6) and h["act/adv_mean"] == pytest.approx(0,
                                                                                                                abs=1e-6)
