"""Rehearsal exploitation monitor: hand-worked episodes on real tool-world tasks (a rehearsed success
for a call that fails in the real world earns a rehearsed reward the real world would not give, and
the reverse), and the trainer with the monitor on rolls out and trains exactly as with it off."""

from __future__ import annotations

import json

import pytest

from envace.roles.prompts import RESULT_CLOSE, RESULT_OPEN
from envace.trainers.arms.shadow import shadow_metrics, shadow_replay
from envace.trainers.rewarding import RewardScorer
from envace.types import Message, Mode, Role, ToolCall, Trajectory, Turn
from envace.worlds.environment import WorldEnvironment
from envace.worlds.generator import generate_tasks


@pytest.fixture(scope="module")
def tasks():
    return generate_tasks(6, "train", 3)


def _episode(task, steps: list[tuple[ToolCall, dict]], reply: str) -> Trajectory:
    """A one-user-turn episode: each call answered by the given rehearsed result, then `reply`."""
    msgs = [m for m in task.messages[:2]]  # system + user
    turns = []
    for call, result in steps:
        msgs.append(Message(role="assistant", content="", tool_calls=[call]))
        text = json.dumps(result)
        msgs.append(Message(role="tool", content=text, name=call.name))
        turns.append(Turn(role=Role.REHEARSE, prompt_ids=[1], response_ids=[2], logprobs=[0.0],
                          text=f"{RESULT_OPEN}\n{text}\n{RESULT_CLOSE}", temperature=1.0, call=call))
    msgs.append(Message(role="assistant", content=reply))
    traj = Trajectory(task=task, prompt_index=0, sample_index=0, mode=Mode.REHEARSE, messages=msgs, turns=turns)
    RewardScorer("checklist_rule").score([traj])
    return traj


def test_a_rehearsed_success_that_fails_for_real_is_an_exploit(tasks):
    task = tasks[0]  # "What is the balance of a4?" -> get_balance(a4) = 35; items: the call (0.5), "a4: 35" (0.5)
    scorer = RewardScorer("checklist_rule")
    a4 = (ToolCall("get_balance", {"account": "a4"}), {"account": "a4", "balance": 35, "status": "open"})
    gold = _episode(task, [a4], "a4: 35")
    res = shadow_replay(gold, scorer.reward_of, WorldEnvironment)
    assert (res.rehearsed, res.real, res.gap, res.calls, res.exact) == (1.0, 1.0, 0.0, 1, [1.0])
    assert gold.turns[0].real_observation.content == {"account": "a4", "balance": 35, "status": "open"}
    # an extra call on an account that does not exist, rehearsed as a success: no failed tool in the
    # rehearsed episode (reward 1.0), an "unknown account" error in the real one (turn scores 0)
    zz = (ToolCall("get_balance", {"account": "zz"}), {"account": "zz", "balance": 1, "status": "open"})
    fooled = _episode(task, [a4, zz], "a4: 35")
    res2 = shadow_replay(fooled, scorer.reward_of, WorldEnvironment)
    assert (res2.rehearsed, res2.real, res2.gap, res2.exact) == (1.0, 0.0, 1.0, [1.0, 0.0])
    assert fooled.turns[1].real_observation.error is not None
    assert fooled.reward == 1.0 and fooled.messages[-2].content.startswith('{"account": "zz"')  # untouched


def test_a_rehearsed_failure_that_succeeds_for_real_is_a_negative_gap(tasks):
    task = tasks[3]  # balances of a7 (24) and a3 (57): four items of 0.25
    a7 = (ToolCall("get_balance", {"account": "a7"}), {"account": "a7", "balance": 24, "status": "frozen"})
    a3 = (ToolCall("get_balance", {"account": "a3"}), {"error": "timeout"})
    pessimist = _episode(task, [a7, a3], "a7: 24, a3: 57")
    res = shadow_replay(pessimist, RewardScorer("checklist_rule").reward_of, WorldEnvironment)
    assert (res.rehearsed, res.real, res.gap) == (0.0, 1.0, -1.0)
    m = shadow_metrics([pessimist, pessimist], [res, res])
    assert m["shadow/reward_rehearsed"] == 0.0 and m["shadow/reward_real"] == 1.0 and m["shadow/gap"] == -1.0
    assert m["shadow/rehearse/gap"] == -1.0 and m["shadow/rehearse/trajectories"] == 2.0
    assert m["shadow/act/trajectories"] == 0.0  # hand-built episodes hold no Act turns
    assert m["shadow/env_calls"] == 4.0 and m["shadow/exact_match"] == 0.5


def _cfg(model_dir, out, shadow):
    from envace.trainers.config import TrainConfig

    return TrainConfig.model_validate(dict(
        model=str(model_dir), out_dir=str(out), steps=2, prompts_per_step=3, k=2, save_every=5, threads=1,
        progress=False, data={"n_tasks": 20}, tracking={"enabled": False}, shadow_monitor=shadow,
        rollout={"max_assistant_turns": 2, "act": {"max_new_tokens": 16}, "rehearse": {"max_new_tokens": 16}}))


def test_monitor_changes_nothing_the_policy_sees_or_learns(tiny_model_dir, tmp_path):
    from envace.trainers.embedded import train

    on = train(_cfg(tiny_model_dir, tmp_path / "on", None)).history  # None: on for world tasks in rehearse mode
    off = train(_cfg(tiny_model_dir, tmp_path / "off", False)).history
    for a, b in zip(on, off, strict=True):
        same = {k: v for k, v in b.items() if not k.startswith("time/")}
        assert {k: a[k] for k in same} == same  # rewards, advantages, losses, grad norms: all identical
        assert not any(k.startswith("shadow/") for k in b)
        assert a["env_calls"] == 0.0  # the rollout itself touched no real environment
        assert a["shadow/reward_rehearsed"] == pytest.approx(a["reward/mean"])
        assert a["shadow/trajectories"] == 6.0
        assert a["shadow/gap"] == pytest.approx(a["shadow/reward_rehearsed"] - a["shadow/reward_real"])


def test_monitor_switch_is_validated(tmp_path):
    from envace.trainers.config import TrainConfig

    with pytest.raises(ValueError, match="shadow_monitor=true.*rollout.mode='env'"):
        TrainConfig.model_validate({"model": "m", "shadow_monitor": True, "rollout": {"mode": "env"}})
    assert not TrainConfig.model_validate({"model": "m", "rollout": {"mode": "env"}}).shadow_enabled
    assert TrainConfig.model_validate({"model": "m"}).shadow_enabled
    assert not TrainConfig.model_validate({"model": "m", "data": {"source": "cm2", "path": "x"}}).shadow_enabled
