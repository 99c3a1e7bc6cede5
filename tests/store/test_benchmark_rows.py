"""Benchmark trajectories in the store: hand-built per-task records (the shape envace.benchmarks adapters
write) go in as one trajectory per (set, task, attempt) with their messages as turns, their score and
error; putting them again adds nothing; a new attempt adds only itself; a task-id hash collision raises."""

from __future__ import annotations

import json

import pytest
import sqlalchemy as sa

from envace.store.benchmark_rows import (
    benchmark_bundles,
    check_collisions,
    put_benchmark_records,
    record_error,
    record_score,
    task_index,
)
from envace.store.eval_runs import benchmark_protocol, eval_run_id
from envace.store.runs import RunInfo, register_run
from envace.store.session import make_engine, upgrade

CALL = {"id": "c1", "type": "function", "function": {"name": "get_order", "arguments": "{\"id\": \"7\"}"}}
CHAT = [{"role": "system", "content": "You are an airline agent."},
        {"role": "user", "content": "Where is order 7?"},
        {"role": "assistant", "content": "", "tool_calls": [CALL]},
        {"role": "tool", "tool_call_id": "c1", "name": "get_order", "content": "{\"status\": \"shipped\"}"},
        {"role": "assistant", "content": "It has shipped."}]
JUDGE = [{"role": "user", "content": "Did the agent say it shipped?"}, {"role": "assistant", "content": "yes"}]


def records(attempts: int = 2) -> list[dict]:
    out = []
    for sample in range(attempts):
        out.append({"id": "t-ok", "category": "airline", "sample": sample, "seed": 7, "valid": True, "reward": 1.0,
                    "task_error": None, "messages": CHAT, "judge_messages": JUDGE})
        out.append({"id": "t-bad", "category": "airline", "sample": sample, "seed": 7, "valid": False,
                    "reward": 0.0, "messages": CHAT[:2],
                    "task_error": {"stage": "evaluator", "type": "ValueError", "message": "boom"}})
    return out


def rows(engine, run_id):
    with engine.connect() as c:
        traj = c.execute(sa.text(
            "SELECT id, benchmark, mode, rollout_mode, split, domain, step, prompt_id, prompt_index, sample_index, "
            "reward, error, n_turns, n_tool_calls, env_calls, reward_breakdown FROM trajectories "
            "WHERE run_id = :r ORDER BY prompt_id, sample_index"), {"r": run_id}).all()
        turns = {t.id: c.execute(sa.text("SELECT role, user_turn, text, tool_calls, observation FROM turns "
                                         "WHERE trajectory_id = :t ORDER BY turn_index"), {"t": t.id}).all()
                 for t in traj}
    return traj, turns


def test_records_round_trip_and_re_put_is_a_no_op(store_url):
    engine = make_engine(store_url)
    upgrade(engine)
    register_run(engine, RunInfo(id="ev1", kind="eval"))
    assert put_benchmark_records(engine, "ev1", "tau2", records(), seed=7) == (4, 0)
    traj, turns = rows(engine, "ev1")
    assert [(t.prompt_id, t.sample_index) for t in traj] == [("t-bad", 0), ("t-bad", 1), ("t-ok", 0), ("t-ok", 1)]
    assert {(t.benchmark, t.mode, t.rollout_mode, t.split, t.domain, t.step) for t in traj} == \
        {("tau2", "eval", "env", "airline", "airline", 7)}
    assert [t.prompt_index for t in traj] == [task_index("t-bad")] * 2 + [task_index("t-ok")] * 2
    assert [t.reward for t in traj] == [0.0, 0.0, 1.0, 1.0]
    assert [t.error for t in traj] == ["evaluator: ValueError: boom"] * 2 + [None, None]
    ok = traj[2]
    assert (ok.n_turns, ok.n_tool_calls, ok.env_calls) == (2, 1, 1)  # two assistant messages, one call, one result
    breakdown = ok.reward_breakdown if isinstance(ok.reward_breakdown, dict) else json.loads(ok.reward_breakdown)
    assert breakdown["record"]["valid"] is True and "messages" not in breakdown["record"]
    got = turns[ok.id]
    assert [r.role for r in got] == ["system", "user", "act", "env", "act", "judge", "judge"]
    assert [r.user_turn for r in got] == [0, 0, 0, 0, 0, 0, 0]
    assert [r.text for r in got] == [m["content"] for m in CHAT] + [m["content"] for m in JUDGE]
    def load(v):
        return v if not isinstance(v, str) else json.loads(v)

    assert load(got[2].tool_calls) == [{"name": "get_order", "arguments": {"id": "7"}, "id": "c1"}]
    obs = load(got[3].observation)
    assert obs["content"] == {"status": "shipped"} and obs["tool_call_id"] == "c1"
    assert [load(r.observation)["judge_role"] for r in got[5:]] == ["user", "assistant"]
    assert [r.role for r in turns[traj[0].id]] == ["system", "user"]

    assert put_benchmark_records(engine, "ev1", "tau2", records(), seed=7) == (0, 4)  # a re-run adds nothing
    assert put_benchmark_records(engine, "ev1", "tau2", records(3), seed=7) == (2, 4)  # k 2 -> 3: the new attempt
    assert put_benchmark_records(engine, "ev1", "tau2", records(), seed=8) == (4, 0)  # another seed: another step
    with engine.connect() as c:
        assert c.execute(sa.text("SELECT count(*) FROM trajectories WHERE run_id = 'ev1'")).scalar_one() == 10
        assert c.execute(sa.text("SELECT count(*) FROM turns")).scalar_one() == 2 * (7 + 2) + 7 + 2 + 2 * (7 + 2)
    engine.dispose()


def test_score_and_error_rules():
    assert record_score({"score": 0.25, "reward": 1.0, "valid": True}) == 0.25
    assert record_score({"reward": 0.5, "valid": True}) == 0.5
    assert record_score({"valid": True}) == 1.0 and record_score({"valid": False}) == 0.0
    assert record_score({"error": "timeout"}) == 0.0  # FinMCP's transport error: counted as a failure
    assert record_score({}) is None
    assert record_error({"task_error": {"stage": "adapter", "type": "KeyError", "message": "'x'"}}) == \
        "adapter: KeyError: 'x'"
    assert record_error({"error": "ConnectionError: refused"}) == "ConnectionError: refused"
    assert record_error({"task_error": None, "error": None}) is None
    # BFCL keeps its checker's verdict in `error`: a wrong answer, not an error of the task's run
    assert record_error({"task_error": None, "error": ["Invalid syntax. Failed to decode AST."]}) is None


def test_a_hash_collision_between_two_task_ids_raises():
    a, b = benchmark_bundles("bfcl", [{"id": "a", "category": "simple", "valid": True},
                                      {"id": "b", "category": "simple", "valid": False}], "r", 0)
    b.trajectory["prompt_index"] = a.trajectory["prompt_index"]  # as if their hashes collided
    with pytest.raises(ValueError, match="tasks 'a' and 'b' of set 'simple' hash to the same store key"):
        check_collisions([a, b])
    with pytest.raises(ValueError, match="tasks 'a' and 'b'"):  # against a row stored by an earlier run
        check_collisions([b], [("simple", a.trajectory["prompt_index"], "a")])
    check_collisions([a], [("other-set", a.trajectory["prompt_index"], "b")])  # another set: another key


def test_bad_records_name_the_record_and_field():
    with pytest.raises(ValueError, match="bfcl record 1 has no task id"):
        benchmark_bundles("bfcl", [{"id": "x"}, {"category": "simple"}], "r", 0)
    with pytest.raises(ValueError, match="tau2 record 0 is str"):
        benchmark_bundles("tau2", ["oops"], "r", 0)
    with pytest.raises(ValueError, match="set \\(category\\) .* is 70 characters"):
        benchmark_bundles("vita", [{"id": "x", "category": "c" * 70}], "r", 0)


class _Result:
    def __init__(self, judge: str, temperature: float, model_dir: str) -> None:
        self.models = {"policy": "p", "user_simulator": "u", "judge": judge}
        self.meta = {"slots": {"policy": {"model_dir": model_dir, "name": "p", "temperature": temperature},
                               "judge": {"model_dir": judge, "name": judge}}}


def test_eval_run_id_is_the_checkpoint_benchmark_and_protocol():
    base = eval_run_id("md5-a", "tau2", benchmark_protocol(_Result("j1", 0.6, "/a/policy")))
    assert base.startswith("eval-") and len(base) <= 64
    # the policy's path is not part of it (the checkpoint's content hash is): a copied checkpoint keeps its run
    assert eval_run_id("md5-a", "tau2", benchmark_protocol(_Result("j1", 0.6, "/copy/policy"))) == base
    others = {eval_run_id("md5-b", "tau2", benchmark_protocol(_Result("j1", 0.6, "/a/policy"))),
              eval_run_id("md5-a", "vita", benchmark_protocol(_Result("j1", 0.6, "/a/policy"))),
              eval_run_id("md5-a", "tau2", benchmark_protocol(_Result("j2", 0.6, "/a/policy"))),
              eval_run_id("md5-a", "tau2", benchmark_protocol(_Result("j1", 0.0, "/a/policy")))}
    assert base not in others and len(others) == 4
