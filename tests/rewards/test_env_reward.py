"""The verifiable end-state reward and the reward-source switch."""

import copy

import pytest

from envace.rewards import RewardSource, score_trajectory
from envace.types import Mode, ToolCall
from envace.worlds import WorldEnvironment, generate_tasks


@pytest.fixture(scope="module")
def tasks():
    return generate_tasks(54, "val", seed=4)


def test_rehearse_trajectory_is_verified_by_replaying_its_calls(tasks, traj):
    for task in tasks:
        r = score_trajectory(traj(task), RewardSource.ENV_STATE)
        assert r.reward == 1.0 and r.breakdown["state_ok"], task.uuid


def test_wrong_write_in_a_rehearsed_episode_scores_zero(tasks, traj):
    task = next(t for t in tasks if t.meta["shape"] == "receive")
    msgs = copy.deepcopy(task.messages)
    i = next(k for k, m in enumerate(msgs) if m.tool_calls)
    call = msgs[i].tool_calls[0]
    msgs[i].tool_calls[0] = ToolCall(call.name, {**call.arguments, "qty": call.arguments["qty"] + 1})
    r = score_trajectory(traj(task, msgs), "env_state")
    assert r.reward == 0.0 and r.breakdown["state_diff"]
    # the checklist sees the same mistake as one lost item out of one
    assert score_trajectory(traj(task, msgs), "checklist_rule").reward == 0.0


def test_env_mode_uses_the_environment_that_ran_the_episode(tasks, traj):
    task = next(t for t in tasks if t.meta["shape"] == "receive")
    env = WorldEnvironment()
    env.reset(task)  # the episode made no call at all, though its messages claim one
    r = score_trajectory(traj(task, mode=Mode.ENV), RewardSource.ENV_STATE, env=env)
    assert r.reward == 0.0
    for c in task.gold_calls()[0]:
        env.execute(c)
    assert score_trajectory(traj(task, mode=Mode.ENV), RewardSource.ENV_STATE, env=env).reward == 1.0


def test_reward_source_errors_name_the_fix(tasks, traj):
    with pytest.raises(ValueError, match="not one of"):
        score_trajectory(traj(tasks[0]), "vibes")
    with pytest.raises(ValueError, match="needs judge="):
        score_trajectory(traj(tasks[0]), "checklist_llm")
