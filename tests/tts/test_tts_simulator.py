"""Test-time rehearsal with the prompted simulator as the private phase's Rehearse engine (`tts.engine=simulator`):
a tool-world evaluation (envace.evaluation.world.evaluate_world) whose private phase asks a stand-in chat
endpoint (tests/prompted_endpoint.py) for every imagined tool response (the requests are counted) and never the
policy, whose committed episodes run against the real world, and whose private phase creates or touches no
world environment. The policy is the scripted engine double (it really makes calls); its prompts are
rendered by a real tokenizer. Config: the `simulator` slot of `envace eval` and its checks."""

from __future__ import annotations

import json

import pytest
from prompted_endpoint import prompted_endpoint

import envace.tts.rollout as tts_rollout_module
import envace.worlds.environment as world_env
from envace.config import RolloutConfig, SamplingConfig
from envace.engines.slots import ModelSlot
from envace.evaluation.config import EvalConfig
from envace.evaluation.roles import used_slots
from envace.evaluation.world import evaluate_world
from envace.roles.prompted_simulator import SYSTEM_PROMPT
from envace.rollout.simulator_seat import simulator_engine
from envace.tts import TTSConfig
from envace.tts.prompts import ASSESS_MARK, MEMORY_MARK
from envace.types import Mode, Role
from envace.worlds.generator import generate_tasks

CFG = RolloutConfig(mode="env", act=SamplingConfig(temperature=0.0, max_new_tokens=400),
                    rehearse=SamplingConfig(temperature=0.0, max_new_tokens=60), max_context_tokens=60000,
                    max_assistant_turns=3)
BALANCE = {"account": "a1", "balance": 321}  # what the stand-in simulator says every balance is


class Watch:
    """Set while the private phase runs (rehearse_privately is wrapped); records world use during it."""

    private = False
    violations: list[str] = []


class WatchedWorld(world_env.WorldEnvironment):
    def __init__(self, *args, **kwargs):
        if Watch.private:
            Watch.violations.append("created")
        super().__init__(*args, **kwargs)
        self.executed = 0

    def reset(self, task):
        if Watch.private:
            Watch.violations.append("reset")
        return super().reset(task)

    def execute(self, call):
        if Watch.private:
            Watch.violations.append("execute")
        self.executed += 1
        return super().execute(call)


def scripted_policy(prompt: str, _position: int) -> str:
    """One get_balance call per user message, then a reply; fixed reviews and memory."""
    if ASSESS_MARK in prompt:
        return "Achieved: yes."
    if MEMORY_MARK in prompt:
        return "Check the balance first."
    if prompt.rsplit("<|im_start|>", 1)[0].rstrip().endswith("</tool_response><|im_end|>"):
        return "Here is the balance."
    return '<tool_call>\n{"name": "get_balance", "arguments": {"account": "a1"}}\n</tool_call>'


@pytest.fixture
def watched(monkeypatch):
    made: list[WatchedWorld] = []

    def factory(*args, **kwargs):
        made.append(WatchedWorld(*args, **kwargs))
        return made[-1]

    Watch.private, Watch.violations = False, []
    real = tts_rollout_module.rehearse_privately

    def wrapped(*args, **kwargs):
        Watch.private = True
        try:
            return real(*args, **kwargs)
        finally:
            Watch.private = False

    monkeypatch.setattr(tts_rollout_module, "rehearse_privately", wrapped)
    monkeypatch.setattr(world_env, "WorldEnvironment", factory)
    return made


def test_world_eval_rehearses_privately_with_the_simulator(tokenizer, kit, watched):
    tasks = generate_tasks(3, "test", 0)
    assert all(len(t.user_turns) == 1 and "get_balance" in t.tool_names() for t in tasks)
    asked_policy = []  # calls the policy's own Rehearse role was asked to answer: none with tts.engine=simulator
    policy = kit.ScriptedEngine(tokenizer, act=scripted_policy, rehearse=lambda _p, call: asked_policy.append(call)
                                or '<execution_result>\n{"balance": 0}\n</execution_result>')
    seen = []
    with prompted_endpoint(lambda name, args: seen.append((name, args)) or f"Result: {json.dumps(BALANCE)}") \
            as (url, requests):
        sim = simulator_engine(ModelSlot.endpoint(url, "chat-model", max_retries=0))
        stored = []
        out = evaluate_world(policy, tasks, CFG, k=1, seeds=[0], with_fidelity=False,
                             tts=TTSConfig(n=2, engine="simulator"), simulator=sim,
                             on_trajectories=lambda _pass, _seed, trajs: stored.extend(trajs))
    assert out["tts"]["n"] == 2 and out["tasks"] == 3
    # 3 tasks x 2 private rehearsals x 1 imagined call each: 6 simulator requests, the prompted layout
    assert len(requests) == 6 and seen == [("get_balance", {"account": "a1"})] * 6
    assert asked_policy == []
    assert all(b["messages"][0]["content"] == SYSTEM_PROMPT for b in requests)
    private = [t for c in stored for t in c.tts["private"]]
    assert len(private) == 6 and all(t.mode is Mode.SIMULATOR and t.env_calls == 0 for t in private)
    for t in private:
        (reh,) = t.turns_of(Role.REHEARSE)
        assert reh.observation.content == BALANCE and not reh.trainable
        assert [m.content for m in t.messages if m.role == "tool"] == [json.dumps(BALANCE, sort_keys=True)]
    # the committed episodes: one world each, created after its private phase, every call executed for real
    assert Watch.violations == []
    assert len(watched) == len(stored) == 3 and [w.executed for w in watched] == [1, 1, 1]
    assert [c.env_calls for c in stored] == [1, 1, 1] and all(c.mode is Mode.ENV for c in stored)
    committed_tools = [m.content for c in stored for m in c.messages if m.role == "tool"]
    assert all(json.loads(x) != BALANCE for x in committed_tools)  # the real world's answers, not the simulator's


def test_private_phase_refuses_a_missing_or_unasked_simulator(tokenizer, kit):
    from envace.tts import rehearse_privately
    from envace.tts.rollout import first_view

    task = generate_tasks(1, "test", 0)[0]
    policy = kit.ScriptedEngine(tokenizer, act=scripted_policy)
    with pytest.raises(ValueError, match="tts.engine='simulator' but no simulator engine"):
        rehearse_privately([first_view(task)], policy, CFG, TTSConfig(n=1, engine="simulator"), seed=0)
    with pytest.raises(ValueError, match="tts.engine='policy' but a simulator engine"):
        rehearse_privately([first_view(task)], policy, CFG, TTSConfig(n=1), seed=0, simulator=policy)


SIM = {"base_url": "http://127.0.0.1:9/v1", "model": "chat-model"}


def test_eval_config_simulator_slot():
    cfg = EvalConfig(model="/m", tts={"n": 2, "engine": "simulator"}, simulator=SIM)
    assert used_slots(cfg)["simulator"] == cfg.simulator and cfg.simulator.model == "chat-model"
    assert used_slots(EvalConfig(model="/m", tts={"n": 0, "engine": "simulator"}, simulator=SIM))["simulator"] is None
    with pytest.raises(ValueError, match="tts.engine=simulator needs a simulator slot"):
        EvalConfig(model="/m", tts={"n": 2, "engine": "simulator"})
    with pytest.raises(ValueError, match="a simulator is set but tts.engine='policy' never asks it"):
        EvalConfig(model="/m", tts={"n": 2}, simulator=SIM)
    with pytest.raises(ValueError, match="tool world only"):
        EvalConfig(model="/m", benchmarks=["world", "bfcl"], tts={"n": 2, "engine": "simulator"}, simulator=SIM)
    with pytest.raises(ValueError, match="engine"):
        TTSConfig(engine="oracle")
