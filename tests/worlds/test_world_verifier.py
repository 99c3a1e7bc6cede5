"""Gold call sequences replayed through the environment score 1.0; one altered write argument scores 0."""

import json

from envace.types import ToolCall
from envace.worlds import WorldEnvironment, get_domain, replay_gold


def _run(task, calls):
    env = WorldEnvironment()
    env.reset(task)
    obs = [env.execute(c) for c in calls]
    return env, obs


def test_gold_replay_scores_one_on_every_task(split_tasks, traj):
    for tasks in split_tasks.values():
        assert len(tasks) >= 300
        for task in tasks:
            calls = [c for turn in task.gold_calls() for c in turn]
            env, obs = _run(task, calls)
            gold_texts = [m.content for m in task.messages if m.role == "tool"]
            assert [o.to_text() for o in obs] == gold_texts, task.uuid  # responses are the env's, verbatim
            assert env.final_reward(traj(task)) == 1.0, (task.uuid, env.final_check(traj(task)))
            assert get_domain(task.domain).verifier.check(task, replay_gold(task)).ok


def _alternatives(task, name, value):
    """Other valid values for an argument: same vocabulary, or another id of the same table."""
    if isinstance(value, int):
        return [value + 1, value - 1]
    d = get_domain(task.domain)
    pools = [list(v) for v in d.vocab.values()] + [list(t) for t in task.initial_state.values() if isinstance(t, dict)]
    pools.append(["mon", "tue", "wed", "thu", "fri"])
    out = [x for pool in pools if value in pool for x in pool if x != value]
    return out[:3] + [value + "x"]


def test_one_altered_write_argument_scores_zero(split_tasks, traj):
    checked = 0
    for task in split_tasks["train"][:180] + split_tasks["test"][:180]:
        writes = get_domain(task.domain).toolkit_cls.write_tools()
        calls = [c for turn in task.gold_calls() for c in turn]
        for i, call in enumerate(calls):
            if call.name not in writes:
                continue
            for arg, value in call.arguments.items():
                for alt in _alternatives(task, arg, value):
                    altered = list(calls)
                    altered[i] = ToolCall(call.name, {**call.arguments, arg: alt})
                    env, _ = _run(task, altered)
                    assert env.final_reward(traj(task)) == 0.0, (task.uuid, arg, alt)
                    checked += 1
    assert checked > 500


def test_missing_answer_scores_zero_even_with_the_right_state(split_tasks, traj):
    task = next(t for t in split_tasks["train"] if t.meta["shape"] == "check")
    env, _ = _run(task, [c for turn in task.gold_calls() for c in turn])
    no_answer = task.messages[:-1] + [type(task.messages[-1])("assistant", "I checked it.")]
    assert env.final_reward(traj(task, no_answer)) == 0.0
    check = env.final_check(traj(task, no_answer))
    assert check.state_ok and check.missing_answers == [(0, task.meta["answers"][0][0])]


def test_answer_match_is_whole_phrase(split_tasks, traj):
    task = next(t for t in split_tasks["train"] if t.meta["shape"] == "check" and t.domain == "shop")
    env, _ = _run(task, [c for turn in task.gold_calls() for c in turn])
    value = task.meta["answers"][0][0]  # e.g. "lime: 25"
    Msg = type(task.messages[-1])
    assert env.final_reward(traj(task, task.messages[:-1] + [Msg("assistant", f"Stock -> {value.upper()}!")])) == 1.0
    assert env.final_reward(traj(task, task.messages[:-1] + [Msg("assistant", f"{value}0")])) == 0.0


def test_calendar_verifier_ignores_ids_of_rebooked_meetings(split_tasks, traj):
    task = next(t for t in split_tasks["train"] if t.domain == "calendar" and t.meta["shape"] == "book")
    gold = task.gold_calls()[0][0]
    env, obs = _run(task, [gold])
    booked = env.db.events[f"e{len(task.initial_state['events']) + 1}"]
    # cancel the new meeting and book the same slot again: a new id, the same calendar
    env.execute(ToolCall("cancel_event", {"event": f"e{len(task.initial_state['events']) + 1}"}))
    assert env.execute(ToolCall("book", dict(gold.arguments))).ok
    assert env.final_reward(traj(task)) == 1.0
    assert booked.status == "cancelled"
    assert json.loads(obs[0].to_text())["ok"] is True
