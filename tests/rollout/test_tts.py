"""Test-time rehearsal, token level (envace.rollout.tts).

Plumbing runs on a real random tiny Qwen3 behind the real HF engine (quality is irrelevant here); the
isolation count uses the scripted engine double of conftest.py so that the committed run really makes
tool calls. `RecordingEngine` wraps either and keeps every request with its decoded prompt.
"""

from __future__ import annotations

import inspect

import pytest

from envace.config import RolloutConfig, SamplingConfig
from envace.engines.base import GenRequest, GenResult
from envace.roles.act import act_prompt_ids
from envace.roles.prompts import SEC_CURRENT
from envace.rollout import run_rollout
from envace.rollout.tts import TTSConfig, rehearse_privately, tts_rollout
from envace.rollout.tts_prompts import ASSESS_MARK, EARLIER_HEADER, MEMORY_HEADER, MEMORY_MARK, memory_note
from envace.types import Mode, Role


CFG = RolloutConfig(act=SamplingConfig(temperature=1.0, max_new_tokens=10),
                    rehearse=SamplingConfig(temperature=1.0, max_new_tokens=10),
                    max_assistant_turns=2, max_context_tokens=4096)
OPTS = TTSConfig(assess_max_tokens=8, memory_max_tokens=12, transcript_max_chars=300)


class RecordingEngine:
    """Wraps a GenerationEngine; records (decoded prompt, request) of every generation."""

    def __init__(self, engine):
        self.engine, self.tokenizer = engine, engine.tokenizer
        self.requests: list[tuple[str, GenRequest]] = []

    def generate(self, requests: list[GenRequest]) -> list[GenResult]:
        self.requests += [(self.tokenizer.decode(r.prompt_ids), r) for r in requests]
        return self.engine.generate(requests)

    def count(self, marker: str) -> int:
        return sum(marker in text for text, _ in self.requests)


class GuardedFactory:
    """An env factory that raises if called before the private phase has written its memories, and
    records how many generations had happened at its first call."""

    def __init__(self, make, engine: RecordingEngine, expect_memory: bool):
        self.make, self.engine, self.expect_memory = make, engine, expect_memory
        self.first_call_at: int | None = None
        self.made: list = []

    def __call__(self):
        if self.expect_memory and self.engine.count(MEMORY_MARK) == 0:
            raise AssertionError("real environment requested during the private phase")
        if self.first_call_at is None:
            self.first_call_at = len(self.engine.requests)
        env = self.make()
        self.made.append(env)
        return env




def _signature(trajs):
    return [(t.termination, [(turn.role, turn.response_ids) for turn in t.turns]) for t in trajs]


def test_private_phase_signature_has_no_environment():
    params = inspect.signature(rehearse_privately).parameters
    assert not [p for p in params if "env" in p.lower()], params


def test_n1_is_a_plain_committed_run(tiny_engine, tasks, kit):
    engine = RecordingEngine(tiny_engine)
    got = tts_rollout(tasks, engine, CFG, 1, "parallel", kit.ShopEnv, seed=11, options=OPTS)
    plain = run_rollout(tasks, k=1, policy=tiny_engine, mode=Mode.ENV, env_factory=kit.ShopEnv, seed=11,
                        cfg=CFG.model_copy(update={"act": CFG.act.model_copy(update={"temperature": 0.01})}))
    assert _signature(got) == _signature(plain)
    assert all(r.temperature == 0.01 for _, r in engine.requests)
    assert engine.count(SEC_CURRENT) == engine.count(ASSESS_MARK) == engine.count(MEMORY_MARK) == 0
    assert all(t.tts["private"] == [] and t.tts["memory"] == "" for t in got)
    assert [t.messages[0].content for t in got] == [t.system_prompt for t in tasks]  # no note added


def test_parallel_rehearsals_use_distinct_seeds_and_memory_is_in_commit_context(tiny_engine, tokenizer, tasks, kit):
    engine = RecordingEngine(tiny_engine)
    factory = GuardedFactory(kit.ShopEnv, engine, expect_memory=True)
    commits = tts_rollout(tasks, engine, CFG, 3, "parallel", factory, seed=5, options=OPTS)
    assert len(commits) == len(tasks)
    for task, traj in zip(tasks, commits):
        private = traj.tts["private"]
        assert [t.mode for t in private] == [Mode.REHEARSE, Mode.REHEARSE]
        assert all(t.env_calls == 0 for t in private)
        # first Act request of each rehearsal of this task: distinct per-request seeds
        first_prompt = act_prompt_ids(tokenizer, task.messages[:2], task.tools)
        seeds = [r.seed for _, r in engine.requests if r.prompt_ids == first_prompt and r.temperature == 1.0]
        assert len(seeds) == 2 and len(set(seeds)) == 2
        # the memory is policy-written, capped, and sits in the committed run's system prompt
        memory = traj.tts["memory"]
        assert memory and 0 < traj.tts["memory_tokens"] <= OPTS.memory_max_tokens
        assert traj.messages[0].content == task.system_prompt + "\n\n" + memory_note(memory)
        assert traj.turns[0].prompt_ids == act_prompt_ids(tokenizer, traj.messages[:2], task.tools)
        assert MEMORY_HEADER in tokenizer.decode(traj.turns[0].prompt_ids)
        assert len(traj.tts["assessments"]) == 2 and traj.reward_breakdown["tts"]["n"] == 3
    # every generation before the first real environment was private; none after it was
    n_private = factory.first_call_at
    assert n_private == len(engine.requests) - sum(len(t.turns) for t in commits)
    assert engine.count(MEMORY_MARK) == len(tasks)
    assert all(MEMORY_HEADER in text and SEC_CURRENT not in text for text, _ in engine.requests[n_private:])


def test_sequential_rehearsal_sees_earlier_attempts(tiny_engine, tokenizer, tasks, kit):
    engine = RecordingEngine(tiny_engine)
    commits = tts_rollout(tasks, engine, CFG, 3, "sequential", GuardedFactory(kit.ShopEnv, engine, True), seed=2,
                          options=OPTS)
    for task, traj in zip(tasks, commits):
        first, second = traj.tts["private"]
        assert (first.sample_index, second.sample_index) == (0, 1)
        assert EARLIER_HEADER not in first.messages[0].content
        note = second.messages[0].content
        assert note.startswith(task.system_prompt) and EARLIER_HEADER in note
        assert traj.tts["assessments"][0] in note  # the reflection on attempt 1
        assert f"User: {task.user_turns[0]}" in note  # attempt 1's transcript
        assert second.turns[0].prompt_ids == act_prompt_ids(tokenizer, second.messages[:2], task.tools)
    assert len({tuple(t.tts["seeds"]) for t in commits}) == 1 and len(set(commits[0].tts["seeds"])) == 2


def test_isolation_counts_real_calls_only_in_the_commit(tokenizer, tasks, kit):
    """Scripted policy: it calls get_stock once per user turn, in private and for real."""

    def act(prompt: str, position: int) -> str:
        if ASSESS_MARK in prompt:
            return "Achieved: no. Ask for apples first."
        if MEMORY_MARK in prompt:
            return "Call get_stock with apple, then answer."
        last = prompt.rsplit("<|im_start|>", 1)[0]
        if last.rstrip().endswith("</tool_response><|im_end|>"):
            return "Done."
        return kit.call_text("get_stock", item="apple")

    engine = RecordingEngine(kit.ScriptedEngine(tokenizer, act=act, rehearse=kit.stock_result))
    factory = GuardedFactory(kit.ShopEnv, engine, expect_memory=True)
    cfg = RolloutConfig(act=SamplingConfig(max_new_tokens=60), rehearse=SamplingConfig(max_new_tokens=60),
                        max_context_tokens=4096)
    commits = tts_rollout(tasks, engine, cfg, 2, "parallel", factory, seed=0, options=TTSConfig(memory_max_tokens=40))
    private_rehearse = sum(len(t.turns_of(Role.REHEARSE)) for c in commits for t in c.tts["private"])
    assert private_rehearse == 3  # two-turn task: 2 calls, one-turn task: 1 call, all imagined
    assert factory.first_call_at == engine.count(SEC_CURRENT) + engine.count(ASSESS_MARK) + engine.count(MEMORY_MARK) \
        + sum(len(t.turns_of(Role.ACT)) for c in commits for t in c.tts["private"])
    executed = [call for env in factory.made for call in env.executed]
    assert [c.name for c in executed] == ["get_stock"] * 3
    assert sum(c.env_calls for c in commits) == 3
    assert all(c.tts["memory"] == "Call get_stock with apple, then answer." for c in commits)
    assert all(c.tts["achieved"] == [False] for c in commits)


def test_bad_arguments_are_rejected(tiny_engine, tasks, kit):
    with pytest.raises(ValueError, match="N counts attempts"):
        tts_rollout(tasks, tiny_engine, CFG, 0, "parallel", kit.ShopEnv, seed=0)
    with pytest.raises(ValueError, match="not one of"):
        tts_rollout(tasks, tiny_engine, CFG, 2, "beam", kit.ShopEnv, seed=0)
