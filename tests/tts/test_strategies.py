"""Test-time rehearsal's memory strategies (envace.tts.strategies, envace.tts.structured) on a hand-worked case.

The policy is the scripted engine double (tests/episode_kit.py), rehearsing sequentially, so rehearsal i sees
i earlier attempts in its system prompt and follows plan i: rehearsal 0 looks up pears, rehearsal 1 looks up
apples and adds 3, rehearsal 2 adds a plum. Its own reviews say "Achieved: no" (the pears), "Achieved: yes"
(qty 3) and nothing (the plum), so the best-reviewed rehearsal is 1, and every strategy's output is written
out by hand below. The committed run (no earlier attempts in its prompt) follows plan 0 unless a strategy
replays something.
"""

from __future__ import annotations

import json
import re
import sys

import pytest

import envace.tts.rollout as tts_rollout_module
from envace.config import RolloutConfig, SamplingConfig
from envace.engines.reply import AssistantReply
from envace.roles.prompts import SEC_CURRENT
from envace.tts import TTSConfig, memory_names, tts_rollout
from envace.tts.chat import TTSPolicy
from envace.tts.phase import PrivatePhase
from envace.tts.prompts import ASSESS_MARK, MEMORY_MARK, memory_note
from envace.tts.strategies import register_memory, writes_note
from envace.tts.structured import best_rehearsal, bounded
from envace.types import Role, ToolCall, Trajectory

CFG = RolloutConfig(act=SamplingConfig(temperature=1.0, max_new_tokens=60),
                    rehearse=SamplingConfig(temperature=1.0, max_new_tokens=60),
                    max_assistant_turns=4, max_context_tokens=4096)
APPLE = {"name": "get_stock", "arguments": {"item": "apple"}}
ADD = {"name": "add_stock", "arguments": {"item": "apple", "qty": 3}}
PLANS = [[{"name": "get_stock", "arguments": {"item": "pear"}}], [APPLE, ADD],
         [{"name": "add_stock", "arguments": {"item": "plum", "qty": 1}}]]


def block(call: dict) -> str:
    return "<tool_call>\n" + json.dumps(call) + "\n</tool_call>"


def review(transcript: str) -> str:
    if '"qty": 3' in transcript:
        return "Achieved: yes. Keep it."
    if "pear" in transcript:
        return "Achieved: no. Ask for apples."
    return "Not sure."


def act(prompt: str, position: int) -> str:
    if ASSESS_MARK in prompt:
        return review(prompt)
    if MEMORY_MARK in prompt:
        return "Prose memo: add 3 apples."
    plan = PLANS[min(len(re.findall(r"Attempt \d+:", prompt)), 2)]
    return block(plan[position]) if position < len(plan) else "Done."


class Counting:
    """The scripted engine, keeping every prompt and counting the committed run's Act requests (those sent
    outside the private phase)."""

    def __init__(self, engine):
        self.engine, self.tokenizer = engine, engine.tokenizer
        self.private, self.committed_acts, self.prompts = False, 0, []

    def generate(self, requests):
        texts = [self.tokenizer.decode(r.prompt_ids) for r in requests]
        self.prompts += texts
        if not self.private:
            self.committed_acts += sum(SEC_CURRENT not in t for t in texts)
        return self.engine.generate(requests)


@pytest.fixture
def run(tokenizer, kit, monkeypatch):
    """run(memory, n=3) -> (committed trajectory, its real environment, the engine)."""
    def go(memory: str, n: int = 3, **knobs):
        engine = Counting(kit.ScriptedEngine(tokenizer, act=act, rehearse=kit.stock_result))
        real = tts_rollout_module.rehearse_privately

        def marked(*args, **kwargs):
            engine.private = True
            try:
                return real(*args, **kwargs)
            finally:
                engine.private = False

        monkeypatch.setattr(tts_rollout_module, "rehearse_privately", marked)
        factory = kit.CountingFactory(kit.ShopEnv)
        task = kit.make_task("stock", ["Stock up on apples."], {"apple": 5, "pear": 7, "plum": 2})
        tts = TTSConfig(n=n, mode="sequential", memory=memory, **{"memory_max_tokens": 400, **knobs})
        (traj,) = tts_rollout([task], engine, CFG, tts, factory, seed=1)
        (env,) = factory.made
        return traj, env, engine
    return go


def test_the_hand_worked_rehearsals_and_reviews(run):
    traj, _, _ = run("prose")
    (phase,) = traj.tts["phases"]
    assert phase["achieved"] == [False, True, None]
    firsts = [t.turns_of(Role.ACT)[0].tool_calls for t in traj.tts["private"]]
    assert firsts == [[ToolCall("get_stock", {"item": "pear"})], [ToolCall(**APPLE)],
                      [ToolCall("add_stock", {"item": "plum", "qty": 1})]]


def test_prose_is_the_policys_own_note(run):
    traj, env, _ = run("prose")
    assert traj.tts["memory"] == "Prose memo: add 3 apples." and traj.tts["memory_strategy"] == "prose"
    assert traj.tts["phases"][0]["chosen"] is None
    assert traj.messages[0].content == "You manage a shop.\n\n" + memory_note("Prose memo: add 3 apples.")
    assert env.executed == [ToolCall("get_stock", {"item": "pear"})]


def test_calls_results_is_the_best_rehearsals_calls_and_imagined_results_verbatim(run):
    traj, env, _ = run("calls_results")
    memory = ('1. get_stock {"item": "apple"}\n'
              '   result: {"item": "apple", "rehearsed": "get_stock", "stock": 42}\n'
              '2. add_stock {"item": "apple", "qty": 3}\n'
              '   result: {"item": "apple", "rehearsed": "add_stock", "stock": 42}')
    assert traj.tts["memory"] == memory and traj.tts["phases"][0]["chosen"] == 1
    assert traj.messages[0].content == "You manage a shop.\n\n" + memory_note(memory)
    assert env.executed == [ToolCall("get_stock", {"item": "pear"})]  # the note is given, the script ignores it


def test_calls_is_the_best_rehearsals_calls_alone(run):
    traj, _, engine = run("calls")
    assert traj.tts["memory"] == '1. get_stock {"item": "apple"}\n2. add_stock {"item": "apple", "qty": 3}'
    assert sum(ASSESS_MARK in p for p in engine.prompts) == 3
    assert not any(MEMORY_MARK in p for p in engine.prompts)  # no prose: no memory prompt was generated


def test_structured_memory_keeps_whole_lines_within_the_cap(run, tokenizer):
    full = run("calls_results")[0].tts["memory"].split("\n")
    for cap in (8, 30, 45):
        traj, _, _ = run("calls_results", memory_max_tokens=cap)
        lines = traj.tts["memory"].split("\n")
        count = len(tokenizer.encode(traj.tts["memory"], add_special_tokens=False))
        assert count <= cap and traj.tts["phases"][0]["memory_tokens"] == count
        if len(tokenizer.encode(full[0], add_special_tokens=False)) > cap:  # the head of the first line
            assert len(lines) == 1 and full[0].startswith(lines[0])
        else:  # the longest whole-line prefix: one more line would not fit
            assert lines == full[:len(lines)]
            longer = "\n".join(full[:len(lines) + 1])
            assert len(tokenizer.encode(longer, add_special_tokens=False)) > cap


def test_bounded_on_words_by_hand():
    class Chat:
        tokenizer = None

    assert bounded(["a b", "c d e", "f"], Chat(), 5) == ("a b\nc d e", 5)
    assert bounded(["a b", "c d e", "f"], Chat(), 4) == ("a b", 2)
    assert bounded(["a b c", "d"], Chat(), 1) == ("a", 1)  # not even the first line fits: its head
    assert bounded([], Chat(), 3) == ("", 0)


def test_best_of_n_replays_the_best_rehearsals_first_call_then_goes_on(run):
    traj, env, engine = run("best_of_n")
    chosen = traj.tts["private"][1]
    first, replayed = traj.turns_of(Role.ACT)[0], chosen.turns_of(Role.ACT)[0]
    assert (first.text, first.response_ids, first.tool_calls) == (replayed.text, replayed.response_ids,
                                                                  [ToolCall(**APPLE)])
    assert traj.tts["memory"] == "" and traj.messages[0].content == "You manage a shop."  # no note
    assert traj.tts["phases"][0]["chosen"] == 1 and traj.tts["phases"][0]["replay"] == replayed.text
    # the replayed call ran in the real world, then the policy went on by itself (plan 0 at position 1: Done.)
    assert env.executed == [ToolCall(**APPLE)] and json.loads(traj.messages[3].content) == {"item": "apple",
                                                                                             "stock": 5}
    assert [t.text for t in traj.turns_of(Role.ACT)][1:] == ["Done."]
    assert engine.committed_acts == 1  # only the second Act turn was generated


def test_best_of_n_with_no_rehearsal_making_a_call_acts_on_its_own(run, monkeypatch):
    monkeypatch.setattr(sys.modules[__name__], "PLANS", [[], [], []])  # every rehearsal replies at once
    traj, env, engine = run("best_of_n", n=2)
    assert traj.tts["phases"][0]["replay"] is None and engine.committed_acts == 1 and env.executed == []


def test_best_rehearsal_reads_the_reviews_by_hand():
    def phase(achieved):
        return PrivatePhase(user_turn=0, rehearsals=[Trajectory.__new__(Trajectory)] * len(achieved),
                            achieved=list(achieved))

    assert best_rehearsal(phase([False, True, None])) == 1
    assert best_rehearsal(phase([None, False, None])) == 0  # no verdict beats "no"; the earliest on a tie
    assert best_rehearsal(phase([False, True, True])) == 1
    assert best_rehearsal(phase([False, False])) == 0
    assert best_rehearsal(PrivatePhase(user_turn=0)) is None


def test_the_registry():
    assert memory_names() == ["best_of_n", "calls", "calls_results", "prose"]
    assert [writes_note(n) for n in memory_names()] == [False, True, True, True]
    with pytest.raises(ValueError, match="already registered"):
        register_memory("prose")(lambda inputs: [])
    with pytest.raises(ValueError, match="unknown TTS memory strategy 'x'; valid names: best_of_n, calls"):
        writes_note("x")


class ChatPlans:
    """A BenchPolicy double following the same plans at chat level (sequential rehearsals)."""

    name = "plans"

    def __init__(self):
        self.temperature, self.max_tokens, self.kinds = 0.0, None, []

    def reply(self, messages, tools, *, seed=None, context=None):
        text = messages[-1]["content"] or ""
        if SEC_CURRENT in text:
            self.kinds.append("rehearse")
            return AssistantReply(content='<execution_result>\n{"stock": 42}\n</execution_result>')
        if ASSESS_MARK in text:
            self.kinds.append("assess")
            return AssistantReply(content=review(text))
        self.kinds.append("act")
        plan = PLANS[min(len(re.findall(r"Attempt \d+:", json.dumps(messages))), 2)]
        done = sum(m["role"] == "tool" for m in messages)
        if done >= len(plan):
            return AssistantReply(content="Done.")
        return AssistantReply(content="On it.", tool_calls=[ToolCall(**plan[done])])


def test_best_of_n_at_chat_level_answers_the_first_query_with_the_chosen_reply(kit):
    pol = ChatPlans()
    wrapped = TTSPolicy(pol, TTSConfig(n=3, mode="sequential", memory="best_of_n"))
    messages = [{"role": "system", "content": "You manage a shop."}, {"role": "user", "content": "Stock up on apples."}]
    got = wrapped.reply(messages, kit.TOOLS, context={"benchmark": "b", "entry_id": "e"})
    assert (got.content, got.tool_calls) == ("On it.", [ToolCall(**APPLE)])
    assert pol.kinds[-1] == "assess"  # the committed reply came from the rehearsal, not from a new query
    later = wrapped.reply(messages + [got.to_message(), {"role": "tool", "content": "{}"}], kit.TOOLS,
                          context={"benchmark": "b", "entry_id": "e"})
    assert later.tool_calls == [] and pol.kinds[-1] == "act"  # then the policy goes on by itself (no note)
