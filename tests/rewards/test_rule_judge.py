"""Rule judge over tool-world trajectories (messages only, as in rehearse mode)."""

import copy
import json

import pytest

from envace.rewards import RewardSource, rule_turn_gate, score_rule, score_trajectory
from envace.types import ChecklistItem, Message, TerminationReason, ToolCall
from envace.worlds import generate_tasks


@pytest.fixture(scope="module")
def tasks():
    return generate_tasks(180, "train", seed=3) + generate_tasks(180, "test", seed=3)


def _alter(messages, msg_index, call_index, arg, value):
    out = copy.deepcopy(messages)
    call = out[msg_index].tool_calls[call_index]
    out[msg_index].tool_calls[call_index] = ToolCall(call.name, {**call.arguments, arg: value})
    return out


def _other(value):
    return value + 1 if isinstance(value, int) else value + "x"


def test_gold_trajectory_scores_one(tasks, traj):
    for task in tasks:
        s = score_rule(traj(task))
        assert s.score == 1.0 and s.terminated_at is None, task.uuid
        assert all(r.passed for r in s.items)


def test_one_wrong_argument_loses_exactly_that_items_weight(tasks, traj):
    checked = 0
    for task in tasks:
        n_turns = len(task.checklists)
        items = {it.id: it for turn in task.checklists for it in turn}
        turn_of_msg, turn, k = {}, -1, {}
        for i, m in enumerate(task.messages):
            if m.role == "user":
                turn += 1
                k[turn] = 0
            turn_of_msg[i] = turn
        for i, m in enumerate(task.messages):
            for j, call in enumerate(m.tool_calls):
                t = turn_of_msg[i]
                item = items[f"t{t}_call{k[t]}"]
                k[t] += 1
                assert item.extra_info["rule"] == {"kind": "call", "name": call.name, "arguments": call.arguments}
                if item.required_for_next_turn:
                    continue  # covered by the termination test below
                for arg, value in call.arguments.items():
                    s = score_rule(traj(task, _alter(task.messages, i, j, arg, _other(value))))
                    assert s.score == pytest.approx(1.0 - item.weight / n_turns), (task.uuid, arg)
                    assert [r.item_id for r in s.items if not r.passed] == [item.id]
                    checked += 1
    assert checked > 500


def test_required_lookup_failure_ends_a_two_turn_episode(tasks, traj):
    task = next(t for t in tasks if t.meta["shape"] == "two_turn")
    first = task.checklists[0][0]
    assert first.required_for_next_turn
    i = next(i for i, m in enumerate(task.messages) if m.tool_calls)
    arg = next(iter(task.messages[i].tool_calls[0].arguments))
    wrong = _alter(task.messages, i, 0, arg, "zed")
    s = score_rule(traj(task, wrong))
    # turn 1 keeps its answer item; turn 2 is cut off: (1 - w_first) / 2
    assert s.terminated_at == 0
    assert s.score == pytest.approx((1.0 - first.weight) / 2)
    assert not rule_turn_gate(task, wrong, 0) and rule_turn_gate(task, task.messages, 0)
    r = score_trajectory(traj(task, wrong), RewardSource.CHECKLIST_RULE)
    assert r.termination is TerminationReason.REQUIRED_CHECK_FAILED


def test_missing_answer_and_failed_tool_call(tasks, traj):
    task = next(t for t in tasks if t.meta["shape"] == "pair")  # one turn: 2 calls + 2 answers, weight 1/4 each
    no_reply = task.messages[:-1] + [Message("assistant", task.meta["answers"][0][0])]
    assert score_rule(traj(task, no_reply)).score == pytest.approx(0.75)
    failed = copy.deepcopy(task.messages)
    tool_i = next(i for i, m in enumerate(failed) if m.role == "tool")
    failed[tool_i].content = json.dumps({"error": "unknown item"})
    s = score_rule(traj(task, failed))
    assert s.score == 0.0 and s.tool_failed == [True]
    failed[tool_i].content = json.dumps({"error_tool_call": {"code": "INVALID_PARAMETERS"}})
    assert score_rule(traj(task, failed)).score == 0.0


def test_skipped_write_branch_is_checked(tasks, traj):
    task = next(t for t in tasks if t.meta["shape"] == "restock_if_low" and len(t.gold_calls()[0]) == 1)
    item = task.checklists[0][-1]
    assert item.extra_info["rule"] == {"kind": "no_call", "name": "add_stock"}
    extra = copy.deepcopy(task.messages)
    extra.insert(-1, Message("assistant", "", tool_calls=[ToolCall("add_stock", {"item": "apple", "qty": 3})]))
    extra.insert(-1, Message("tool", json.dumps({"added": 3, "item": "apple", "ok": True}), name="add_stock"))
    assert score_rule(traj(task, extra)).score == pytest.approx(1.0 - item.weight)


def test_truncated_episode_scores_unreached_turns_zero(tasks, traj):
    task = next(t for t in tasks if t.meta["shape"] == "two_turn")
    first_turn = task.messages[: next(i for i, m in enumerate(task.messages) if m.role == "user" and i > 1)]
    assert score_rule(traj(task, first_turn)).score == pytest.approx(0.5)


def test_item_without_rule_is_a_judge_error_not_a_zero(tasks, traj):
    task = copy.deepcopy(tasks[0])
    task.checklists[0].append(ChecklistItem(id="free", question="Is the reply polite?", weight=0.0))
    s = score_rule(traj(task))
    assert s.score is None and s.judge_error is not None and s.judge_error.item_id == "free"
    r = score_trajectory(traj(task), "checklist_rule")
    t = traj(task)
    t.termination = TerminationReason.FINAL_REPLY
    r.apply_to(t)
    assert t.reward is None and t.termination is TerminationReason.JUDGE_ERROR
    assert t.reward_breakdown["judge_error"]["item_id"] == "free"
