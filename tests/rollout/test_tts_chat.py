"""Test-time rehearsal, chat level (envace.rollout.tts_chat): private phase over a BenchPolicy, the
`TTSPolicy` wrapper used by the benchmarks, and a committed chat episode against a real Environment.

`ScriptedChat` is a BenchPolicy test double: it answers by looking at what is asked (a Rehearse chat,
a review, the memory prompt, or an Act query) and logs every query with its context and temperature.
"""

from __future__ import annotations

import inspect
import json

from envace.benchmarks.base import AssistantReply
from envace.roles.prompts import SEC_CURRENT
from envace.rollout.tts import TTSConfig
from envace.rollout.tts_chat import TTSPolicy, rehearse_chat, tts_chat_episode
from envace.rollout.tts_prompts import ASSESS_MARK, EARLIER_HEADER, MEMORY_HEADER, MEMORY_MARK
from envace.types import ToolCall


class ScriptedChat:
    name = "scripted"

    def __init__(self, rehearsed: str = '<execution_result>\n{"item": "apple", "stock": 3}\n</execution_result>'):
        self.temperature, self.max_tokens = 0.0, None
        self.log: list[dict] = []
        self.rehearsed = rehearsed

    def reply(self, messages, tools, *, seed=None, context=None):
        text = messages[-1]["content"] or ""
        kind = ("rehearse" if SEC_CURRENT in text else "assess" if ASSESS_MARK in text
                else "memory" if MEMORY_MARK in text else "act")
        self.log.append({"kind": kind, "messages": messages, "seed": seed, "context": dict(context or {}),
                         "temperature": self.temperature, "max_tokens": self.max_tokens})
        if kind == "rehearse":
            return AssistantReply(content=self.rehearsed)
        if kind == "assess":
            reviews = sum(e["kind"] == "assess" for e in self.log)
            return AssistantReply(content=f"Achieved: no. Attempt review #{reviews}")
        if kind == "memory":
            return AssistantReply(content="Check the apple stock first. " + "word " * 100)
        if messages[-1]["role"] == "tool":
            return AssistantReply(content="There are 3 apples.")
        return AssistantReply(tool_calls=[ToolCall("get_stock", {"item": "apple"}, id="c1")],
                              finish_reason="tool_calls")


MESSAGES = [{"role": "system", "content": "You manage a shop."}, {"role": "user", "content": "How many apples?"}]


def test_private_function_takes_no_environment():
    assert not [p for p in inspect.signature(rehearse_chat).parameters if "env" in p.lower()]


def test_parallel_rehearsal_episodes_reviews_and_memory(kit):
    pol = ScriptedChat()
    reh = rehearse_chat(pol, MESSAGES, kit.TOOLS, n=3, mode="parallel", seed=1, options=TTSConfig(memory_max_tokens=10))
    assert [e.termination for e in reh.episodes] == ["final_reply", "final_reply"]
    ep = reh.episodes[0]
    assert [m["role"] for m in ep.messages] == ["system", "user", "assistant", "tool", "assistant"]
    assert json.loads(ep.messages[3]["content"]) == {"item": "apple", "stock": 3}  # written by the policy
    assert [e.achieved for e in reh.episodes] == [False, False]
    assert reh.memory.split() == ["Check", "the", "apple", "stock", "first."] + ["word"] * 5  # capped at 10
    act_seeds = [e["seed"] for e in pol.log if e["kind"] == "act" and e["context"].get("step") == 0]
    assert len(act_seeds) == 2 and act_seeds[0] != act_seeds[1]
    assert {e["temperature"] for e in pol.log} == {1.0}  # explore temperature on a copy
    assert pol.temperature == 0.0  # the caller's policy is untouched
    assert {e["max_tokens"] for e in pol.log if e["kind"] == "memory"} == {10}
    assert all(e["context"]["tts"] == "private" for e in pol.log)
    # no earlier attempts shown in parallel mode
    assert not any(EARLIER_HEADER in e["messages"][0]["content"] for e in pol.log if e["kind"] == "act")


def test_sequential_rehearsal_shows_earlier_attempts(kit):
    pol = ScriptedChat()
    rehearse_chat(pol, MESSAGES, kit.TOOLS, n=3, mode="sequential", seed=1)
    firsts = [e for e in pol.log if e["kind"] == "act" and e["context"].get("step") == 0]
    assert EARLIER_HEADER not in firsts[0]["messages"][0]["content"]
    second = firsts[1]["messages"][0]["content"]
    assert second.startswith("You manage a shop.") and EARLIER_HEADER in second
    assert "Attempt review #1" in second and "Tool[get_stock]" in second


def test_tts_policy_rehearses_once_per_episode_and_commits_with_memory(kit):
    pol = ScriptedChat()
    wrapped = TTSPolicy(pol, 2, "parallel", seed=3)
    ctx = {"benchmark": "x", "entry_id": "e1", "sample": 0}
    r1 = wrapped.reply(MESSAGES, kit.TOOLS, seed=9, context=ctx)
    n_private = len(pol.log) - 1
    assert [e["kind"] for e in pol.log[:n_private]] == ["act", "rehearse", "act", "assess", "memory"]
    commit = pol.log[-1]
    assert commit["context"] == ctx and commit["temperature"] == 0.01 and commit["seed"] == 9
    system = commit["messages"][0]["content"]
    assert MEMORY_HEADER in system and "Check the apple stock" in system
    # later queries of the same episode reuse the memory; a new entry rehearses again
    history = MESSAGES + [r1.to_message(), {"role": "tool", "tool_call_id": "c1", "content": "{}"}]
    wrapped.reply(history, kit.TOOLS, context={**ctx, "step": 1})
    assert len(pol.log) == n_private + 2
    wrapped.reply(MESSAGES, kit.TOOLS, context={**ctx, "entry_id": "e2"})
    assert len(pol.log) == 2 * n_private + 3
    assert len(wrapped.rehearsals) == 2


def test_n1_wrapper_is_the_plain_policy(kit):
    pol = ScriptedChat()
    TTSPolicy(pol, 1, "sequential").reply(MESSAGES, kit.TOOLS, seed=4)
    assert len(pol.log) == 1 and pol.log[0]["messages"] == MESSAGES


def test_committed_episode_creates_the_environment_after_the_private_phase(kit):
    pol = ScriptedChat()
    made = []

    def factory():
        if not any(e["kind"] == "memory" for e in pol.log):
            raise AssertionError("environment requested during the private phase")
        made.append((len(pol.log), kit.ShopEnv()))
        return made[-1][1]

    task = kit.make_task("t", ["How many apples?"], {"apple": 5, "pear": 1})
    out = tts_chat_episode(pol, MESSAGES, kit.TOOLS, factory, task, n=3, mode="sequential", seed=0)
    assert len(made) == 1 and made[0][0] == len([e for e in pol.log if e["context"].get("tts") == "private"])
    env = made[0][1]
    assert [c.name for c in env.executed] == ["get_stock"] and out.env_calls == 1
    assert json.loads(out.messages[3]["content"]) == {"item": "apple", "stock": 5}  # the real answer
    assert out.termination == "final_reply" and MEMORY_HEADER in out.messages[0]["content"]


def test_malformed_rehearsal_ends_the_private_episode(kit):
    pol = ScriptedChat(rehearsed="the stock is probably 3")
    reh = rehearse_chat(pol, MESSAGES, kit.TOOLS, n=2, mode="parallel", seed=0)
    ep = reh.episodes[0]
    assert ep.termination == "rehearse_error"
    assert "NO_EXECUTION_RESULT_TAG_FOUND" in ep.messages[-1]["content"]
