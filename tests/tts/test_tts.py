"""Test-time rehearsal, token level (envace.tts.rollout): N counts private rehearsals, parallel vs
sequential, isolation (no environment, no gold data, no unsaid user turns), k attempts with distinct
seeds, rehearsal at every user message with the memory carried forward.

Most tests use the scripted engine double of conftest.py (so the policy really makes calls and the
prompts can be checked exactly); one runs the real random tiny Qwen3 behind the real HF engine.
`RecordingEngine` keeps every request with its decoded prompt and whether the private phase was running
(the test wraps `rehearse_privately` to mark it).
"""

from __future__ import annotations

import inspect
import json

import pytest

import envace.tts.rollout as tts
from envace.config import RolloutConfig, SamplingConfig
from envace.engines.base import GenRequest, GenResult
from envace.roles.act import act_prompt_ids
from envace.roles.prompted_simulator import SYSTEM_PROMPT as PROMPTED_SYSTEM
from envace.roles.prompts import SEC_CURRENT
from envace.rollout import run_rollout
from envace.tts import MAX_N, TTSConfig, memory_names, rehearse_privately, tts_rollout
from envace.tts.prompts import ASSESS_MARK, EARLIER_HEADER, MEMORY_HEADER, MEMORY_MARK, memory_note
from envace.types import ChecklistItem, Message, Mode, Role, Task, ToolCall

CFG = RolloutConfig(act=SamplingConfig(temperature=1.0, max_new_tokens=60),
                    rehearse=SamplingConfig(temperature=1.0, max_new_tokens=60),
                    max_assistant_turns=4, max_context_tokens=4096)
OPTS = TTSConfig(assess_max_tokens=30, memory_max_tokens=40, transcript_max_chars=2000)


def with_n(n: int, mode: str = "parallel", base: TTSConfig = OPTS, **knobs) -> TTSConfig:
    """`base` with N, the mode and any other knobs set (validated, as a config file would be)."""
    return TTSConfig.model_validate({**base.model_dump(), "n": n, "mode": mode, **knobs})


class RecordingEngine:
    """Wraps a GenerationEngine; records (decoded prompt, request, private?) of every generation."""

    def __init__(self, engine):
        self.engine, self.tokenizer = engine, engine.tokenizer
        self.requests: list[tuple[str, GenRequest, bool]] = []
        self.private = False

    def generate(self, requests: list[GenRequest]) -> list[GenResult]:
        self.requests += [(self.tokenizer.decode(r.prompt_ids), r, self.private) for r in requests]
        return self.engine.generate(requests)

    def count(self, marker: str) -> int:
        return sum(marker in text for text, _, _ in self.requests)

    def prompts(self, private: bool) -> list[str]:
        return [text for text, _, p in self.requests if p is private]


@pytest.fixture
def mark_private(monkeypatch):
    """Wrap tts.rehearse_privately so that engines and environments can tell the private phase is on."""
    watchers: list = []

    def install(*objs):
        watchers.extend(objs)
        real = tts.rehearse_privately

        def wrapped(*args, **kwargs):
            for w in watchers:
                w.private = True
            try:
                return real(*args, **kwargs)
            finally:
                for w in watchers:
                    w.private = False

        monkeypatch.setattr(tts, "rehearse_privately", wrapped)
    return install


def scripted_act(memories: list[str] | None = None):
    """The policy: one get_stock call per user message, then "Done."; fixed reviews; numbered memories."""
    memories = memories if memories is not None else []

    def act(prompt: str, position: int) -> str:
        if ASSESS_MARK in prompt:
            return "Achieved: no. Ask for apples first."
        if MEMORY_MARK in prompt:
            memories.append(f"memo-{len(memories)}")
            return memories[-1]
        last = prompt.rsplit("<|im_start|>", 1)[0]
        if last.rstrip().endswith("</tool_response><|im_end|>"):
            return "Done."
        return ('<tool_call>\n{"name": "get_stock", "arguments": {"item": "apple"}}\n</tool_call>')
    return act


def scripted(kit, tokenizer, memories=None) -> RecordingEngine:
    return RecordingEngine(kit.ScriptedEngine(tokenizer, act=scripted_act(memories), rehearse=kit.stock_result))


def first_act_requests(engine: RecordingEngine, private: bool) -> list[tuple[str, GenRequest]]:
    """Act requests whose prompt holds no assistant turn yet (the first Act of an episode)."""
    return [(t, r) for t, r, p in engine.requests if p is private and SEC_CURRENT not in t
            and ASSESS_MARK not in t and MEMORY_MARK not in t and t.count("<|im_start|>assistant") == 1]


def test_private_phase_signature_has_no_environment():
    """No committed environment reaches the private phase. The one world-like parameter is the diagnosis's
    oracle (`world`: private copies, tests/rollout/test_tts_diagnosis.py), off unless passed."""
    for fn in (rehearse_privately, tts.private_view, tts.first_view):
        params = inspect.signature(fn).parameters
        assert not [p for p in params if "env" in p.lower()]
        assert [p for p in params if "world" in p.lower()] in ([], ["world"])
        assert "world" not in params or params["world"].default is None


def test_n0_is_the_plain_run(tiny_engine, tasks, kit):
    engine = RecordingEngine(tiny_engine)
    got = tts_rollout(tasks, engine, CFG, with_n(0), kit.ShopEnv, seed=11, k=2)
    plain = run_rollout(tasks, k=2, policy=tiny_engine, mode=Mode.ENV, env_factory=kit.ShopEnv, seed=11, cfg=CFG)
    assert [(t.termination, [(u.role, u.response_ids) for u in t.turns]) for t in got] == \
        [(t.termination, [(u.role, u.response_ids) for u in t.turns]) for t in plain]
    assert engine.count(SEC_CURRENT) == engine.count(ASSESS_MARK) == engine.count(MEMORY_MARK) == 0
    assert all(t.tts["private"] == [] and t.tts["memory"] == "" and t.tts["n"] == 0 for t in got)


def test_parallel_n2_makes_two_independent_rehearsals(tasks, tokenizer, kit, mark_private):
    engine = scripted(kit, tokenizer)
    mark_private(engine)
    commits = tts_rollout(tasks, engine, CFG, with_n(2), kit.ShopEnv, seed=5)
    for task, traj in zip(tasks, commits):
        private = traj.tts["private"]
        assert len(private) == 2 and [t.tts["index"] for t in private] == [0, 1]
        assert all(t.mode is Mode.REHEARSE and t.env_calls == 0 for t in private)
        # independent: neither saw the other (no earlier-attempts note); their first Act requests differ in seed
        assert all(EARLIER_HEADER not in m.content for t in private for m in t.messages)
        first = [r for text, r in first_act_requests(engine, True) if task.user_turns[0] in text]
        assert len(first) == 2 and len({r.seed for r in first}) == 2
        assert len(traj.tts["phases"][0]["assessments"]) == 2
        # exactly one committed run, with the memory in its system prompt
        assert traj.mode is Mode.ENV and traj.messages[0].content == task.system_prompt + "\n\n" + \
            memory_note(traj.tts["memory"])
        assert MEMORY_HEADER in tokenizer.decode(traj.turns[0].prompt_ids)
    assert engine.count(MEMORY_MARK) == len(tasks)  # one memory per task, from all its rehearsals


def test_sequential_n2_second_sees_first_and_its_reflection(tasks, tokenizer, kit, mark_private):
    engine = scripted(kit, tokenizer)
    mark_private(engine)
    commits = tts_rollout(tasks, engine, CFG, with_n(2, "sequential"), kit.ShopEnv, seed=2)
    for task, traj in zip(tasks, commits):
        first, second = traj.tts["private"]
        assert EARLIER_HEADER not in first.messages[0].content
        note = second.messages[0].content
        assert note.startswith(task.system_prompt) and EARLIER_HEADER in note
        assert "Attempt 1:" in note and "Attempt 2:" not in note
        assert f"Review: {first.tts['assessment']}" in note  # the reflection on rehearsal 1
        assert f"User: {task.user_turns[0]}" in note and '"rehearsed": "get_stock"' in note  # its imagined run
        # the prompt the second rehearsal's first Act generation really received holds all of that
        decoded = tokenizer.decode(second.turns[0].prompt_ids)
        assert second.turns[0].prompt_ids == act_prompt_ids(tokenizer, second.messages[:2], task.tools)
        assert EARLIER_HEADER in decoded and first.tts["assessment"] in decoded
    assert len(set(commits[0].tts["phases"][0]["seeds"])) == 2


CANARY_GOLD, CANARY_LATER = "CANARY-7f3a-gold", "CANARY-91c2-later"


def _canary_task(kit) -> Task:
    gold = ToolCall("get_stock", {"item": f"apple {CANARY_GOLD}"})
    msgs = [Message("system", "You manage a shop."), Message("user", "How many apples?"),
            Message("assistant", f"Let me look. {CANARY_GOLD}", tool_calls=[gold]),
            Message("tool", json.dumps({"item": "apple", "stock": 5, "note": CANARY_GOLD}), name="get_stock"),
            Message("assistant", f"5 apples. {CANARY_GOLD}"),
            Message("user", f"Now how many pears? {CANARY_LATER}"),
            Message("assistant", f"{CANARY_GOLD}")]
    return Task(uuid="canary", tools=kit.TOOLS, messages=msgs, domain="shop",
                checklists=[[ChecklistItem(id="c", question=CANARY_GOLD)], []],
                initial_state={"apple": 5, "pear": 7, CANARY_GOLD: 1}, meta={"gold": CANARY_GOLD})


@pytest.mark.parametrize("memory", memory_names())
@pytest.mark.parametrize("rehearse_at", ["first", "every"])
@pytest.mark.parametrize("mode", ["parallel", "sequential"])
def test_canary_never_reaches_a_private_prompt(tokenizer, kit, mark_private, rehearse_at, mode, memory):
    engine = scripted(kit, tokenizer)
    mark_private(engine)
    cfg = CFG.model_copy(update={"few_shot": True})  # the private phase must switch it off by itself
    tts = with_n(2, mode, rehearse_at=rehearse_at, memory=memory)
    commits = tts_rollout([_canary_task(kit)], engine, cfg, tts, kit.ShopEnv, seed=0)
    private_prompts = engine.prompts(private=True)
    assert private_prompts and all(CANARY_GOLD not in p for p in private_prompts)
    phases = commits[0].tts["phases"]
    assert [ph["user_turn"] for ph in phases] == ([0, 1] if rehearse_at == "every" else [0])
    first_phase = [t for t in commits[0].tts["private"] if t.tts["user_turn"] == 0]
    assert all(CANARY_LATER not in m.content for t in first_phase for m in t.messages)
    if rehearse_at == "first":
        assert all(CANARY_LATER not in p for p in private_prompts)
    else:  # said by the time of the second phase: only then may it appear
        later = [t for t in commits[0].tts["private"] if t.tts["user_turn"] == 1]
        assert later and all(CANARY_LATER in t.messages[-1].content or CANARY_LATER in
                             [m.content for m in t.messages if m.role == "user"][-1] for t in later)
    # the stored private trajectories carry nothing of the gold either
    for t in commits[0].tts["private"]:
        assert CANARY_GOLD not in json.dumps([m.to_openai() for m in t.task.messages])
        assert t.task.checklists == [] and t.task.initial_state is None and t.task.meta == {}


class RaisingEnv:
    """A real ShopEnv that raises (and records) if it is used while the private phase runs."""

    private = False
    violations: list[str] = []

    def __init__(self, kit):
        self.inner = kit.ShopEnv()
        self.made_private = RaisingEnv.private

    def reset(self, task):
        self._check("reset")
        self.inner.reset(task)

    def execute(self, call):
        self._check("execute")
        return self.inner.execute(call)

    def final_reward(self, trajectory):
        return 0.0

    def _check(self, what):
        if RaisingEnv.private:
            RaisingEnv.violations.append(what)
            raise AssertionError(f"real environment {what} during the private phase")


def prompted_tool(prompt: str, _position: int) -> str:
    """A token-level prompted simulator: answers every prompted-simulator chat with one fixed stock value."""
    assert PROMPTED_SYSTEM.splitlines()[0] in prompt and SEC_CURRENT not in prompt
    return 'The tool says {"item": "apple", "stock": 45}'


@pytest.mark.parametrize("engine_kind", ["policy", "simulator"])
@pytest.mark.parametrize("memory", memory_names())
def test_zero_real_executions_during_the_private_phase(tasks, tokenizer, kit, mark_private, memory, engine_kind):
    """For every memory strategy and either private Rehearse engine (the policy's Rehearse role, or the prompted
    simulator of tts.engine=simulator): the private phase never creates or touches a real environment; the
    committed run executes every real call (best_of_n's replayed first call included)."""
    engine = scripted(kit, tokenizer)
    simulator = None if engine_kind == "policy" else RecordingEngine(kit.ScriptedEngine(tokenizer, act=prompted_tool))
    RaisingEnv.violations = []
    mark_private(engine, RaisingEnv, *([simulator] if simulator else []))
    made = []

    def factory():
        made.append(RaisingEnv(kit))
        return made[-1]

    tts_cfg = with_n(2, "sequential", rehearse_at="every", memory=memory, engine=engine_kind)
    commits = tts_rollout(tasks, engine, CFG, tts_cfg, factory, seed=3, k=2, simulator=simulator)
    assert RaisingEnv.violations == [] and all(not env.made_private for env in made)
    private = [t for c in commits for t in c.tts["private"]]
    # two-turn task: 2 phases x 2 rehearsals, one-turn task: 1 x 2; per attempt (k = 2)
    assert len(private) == (4 + 2) * 2
    assert sum(len(t.turns_of(Role.REHEARSE)) for t in private) == len(private)  # each imagined one call
    assert all(t.env_calls == 0 for t in private)
    if simulator is not None:  # every private response came from the simulator, asked only while private
        assert engine.count(SEC_CURRENT) == 0 and all(p for _, _, p in simulator.requests)
        assert len(simulator.requests) == len(private)
        assert all(t.mode is Mode.SIMULATOR and not t.turns_of(Role.REHEARSE)[0].trainable for t in private)
        assert all(t.turns_of(Role.REHEARSE)[0].observation.content == {"item": "apple", "stock": 45}
                   for t in private)
    executed = [c.name for env in made for c in env.inner.executed]
    assert executed == ["get_stock"] * 6 and sum(c.env_calls for c in commits) == 6  # 3 user messages x k


def test_k_attempts_get_k_distinct_seeds(tasks, tokenizer, kit, mark_private):
    engine = scripted(kit, tokenizer)
    mark_private(engine)
    commits = tts_rollout(tasks, engine, CFG, with_n(1), kit.ShopEnv, seed=9, k=3)
    assert [(c.task.uuid, c.sample_index) for c in commits] == [(t.uuid, a) for t in tasks for a in range(3)]
    for p in range(len(tasks)):
        mine = commits[3 * p: 3 * p + 3]
        assert len({c.tts["seed"] for c in mine}) == 3
        assert len({c.turns[0].temperature for c in mine}) == 1
        private_seeds = [t.tts["seed"] for c in mine for t in c.tts["private"]]
        assert len(private_seeds) == 3 and len(set(private_seeds)) == 3
        assert sorted(t.sample_index for c in mine for t in c.tts["private"]) == [0, 1, 2]
    commit_first = [r.seed for _, r in first_act_requests(engine, False)]
    assert len(commit_first) == 3 * len(tasks) and len(set(commit_first)) == len(commit_first)
    private_first = [r.seed for _, r in first_act_requests(engine, True)]
    assert len(private_first) == 3 * len(tasks) and len(set(private_first)) == len(private_first)


def test_every_turn_carries_the_memory_forward(tasks, tokenizer, kit, mark_private):
    memories: list[str] = []
    engine = scripted(kit, tokenizer, memories)
    mark_private(engine)
    commits = tts_rollout(tasks[:1], engine, CFG, with_n(1, rehearse_at="every"), kit.ShopEnv, seed=1)
    traj = commits[0]
    assert [ph["memory"] for ph in traj.tts["phases"]] == ["memo-0", "memo-1"]
    memory_prompts = [t for t in engine.prompts(True) if MEMORY_MARK in t]
    assert "memo-0" not in memory_prompts[0] and "memo-0" in memory_prompts[1]  # carried into the next memory
    acts = traj.turns_of(Role.ACT)
    by_turn = {u.user_turn: tokenizer.decode(u.prompt_ids) for u in reversed(acts)}
    assert "memo-0" in by_turn[0] and "memo-1" not in by_turn[0]
    assert "memo-1" in by_turn[1]  # the second user message is answered with the new memory
    assert traj.messages[0].content == tasks[0].system_prompt + "\n\n" + memory_note("memo-1")
    second_phase = [t for t in traj.tts["private"] if t.tts["user_turn"] == 1]
    # the later rehearsal starts from the said conversation: the committed call and its REAL result
    assert second_phase and any(m.role == "tool" and '"stock": 5' in m.content for m in second_phase[0].messages)


def test_private_phase_on_the_real_tiny_model(tiny_engine, tasks, kit):
    engine = RecordingEngine(tiny_engine)
    cfg = CFG.model_copy(update={"act": CFG.act.model_copy(update={"max_new_tokens": 10}),
                                 "rehearse": CFG.rehearse.model_copy(update={"max_new_tokens": 10}),
                                 "max_assistant_turns": 2})
    commits = tts_rollout(tasks, engine, cfg, TTSConfig(n=2, assess_max_tokens=8, memory_max_tokens=12,
                                                        transcript_max_chars=300), kit.ShopEnv, seed=5)
    for traj in commits:
        assert len(traj.tts["private"]) == 2 and all(t.termination is not None for t in traj.tts["private"])
        assert 0 < traj.tts["phases"][0]["memory_tokens"] <= 12


def test_bad_settings_are_rejected_once_by_the_config():
    for n in (-1, MAX_N + 1, True, "2"):
        with pytest.raises(ValueError, match=f"N counts private rehearsals.*use 0..{MAX_N}"):
            TTSConfig(n=n)
    with pytest.raises(ValueError, match="'parallel' or 'sequential'"):
        TTSConfig(n=2, mode="beam")
    with pytest.raises(ValueError, match="unknown TTS memory strategy 'notes'; valid names: best_of_n, calls, "
                                         "calls_results, prose"):
        TTSConfig(memory="notes")


@pytest.mark.parametrize("n, mode", [(1, "parallel"), (2, "sequential")])
def test_committed_runs_share_the_plain_runs_seeds(tasks, tokenizer, kit, mark_private, n, mode):
    """Common random numbers: attempt a's committed episode at N >= 1 samples every Act call with the seed of
    sample a of the N = 0 run (same task, same position), so N vs 0 differs only by the rehearsal memory."""
    plain = scripted(kit, tokenizer)
    mark_private(plain)
    tts_rollout(tasks, plain, CFG, with_n(0, mode), kit.ShopEnv, seed=9, k=3)
    engine = scripted(kit, tokenizer)
    mark_private(engine)
    tts_rollout(tasks, engine, CFG, with_n(n, mode), kit.ShopEnv, seed=9, k=3)
    plain_seeds = sorted(r.seed for _, r in first_act_requests(plain, False))
    commit_seeds = sorted(r.seed for _, r in first_act_requests(engine, False))
    assert len(commit_seeds) == 3 * len(tasks) and commit_seeds == plain_seeds
    private = {r.seed for _, r, p in engine.requests if p}
    assert private.isdisjoint(plain_seeds)  # the private phase draws its own numbers
