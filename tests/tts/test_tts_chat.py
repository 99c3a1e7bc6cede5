"""Test-time rehearsal, chat level (envace.tts.chat): the private phase over a BenchPolicy runs on
the one rollout state machine (TerminationReason endings, call-count and context limits), the
`TTSPolicy` wrapper used by the benchmarks, and a committed chat episode against a real Environment.

`ScriptedChat` is a BenchPolicy test double: it answers by looking at what is asked (a Rehearse chat, a
review, the memory prompt, or an Act query) and logs every query with its context and temperature.
"""

from __future__ import annotations

import inspect
import json

from envace.config import RolloutConfig, SamplingConfig
from envace.engines.reply import AssistantReply
from envace.roles.prompts import SEC_CURRENT
from envace.rollout.chat_engine import openai_messages
from envace.tts.chat import TTSPolicy, chat_rollout_config, rehearse_chat, tts_chat_episode
from envace.tts.config import TTSConfig
from envace.tts.prompts import ASSESS_MARK, EARLIER_HEADER, MEMORY_HEADER, MEMORY_MARK
from envace.types import ErrorCode, Role, TerminationReason, ToolCall


class ScriptedChat:
    name = "scripted"

    def __init__(self, rehearsed: str = '<execution_result>\n{"item": "apple", "stock": 3}\n</execution_result>',
                 calls_forever: bool = False):
        self.temperature, self.max_tokens = 0.0, None
        self.log: list[dict] = []
        self.rehearsed, self.calls_forever = rehearsed, calls_forever

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
            memories = sum(e["kind"] == "memory" for e in self.log)
            return AssistantReply(content=f"Memory-{memories}: check the apple stock first. " + "word " * 100)
        if messages[-1]["role"] == "tool" and not self.calls_forever:
            return AssistantReply(content="There are 3 apples.")
        return AssistantReply(tool_calls=[ToolCall("get_stock", {"item": "apple"}, id="c1")],
                              finish_reason="tool_calls")


ONE = TTSConfig(n=1)
MESSAGES = [{"role": "system", "content": "You manage a shop."}, {"role": "user", "content": "How many apples?"}]


def test_private_function_takes_no_environment():
    assert not [p for p in inspect.signature(rehearse_chat).parameters if "env" in p.lower()]


def test_parallel_n2_two_episodes_on_the_state_machine(kit):
    pol = ScriptedChat()
    reh = rehearse_chat(pol, MESSAGES, kit.TOOLS, TTSConfig(n=2, memory_max_tokens=10), seed=1)
    (phase,) = reh.phases
    assert len(phase.rehearsals) == 2
    assert [t.termination for t in phase.rehearsals] == [TerminationReason.FINAL_REPLY] * 2
    ep = phase.rehearsals[0]
    assert [m.role for m in ep.messages] == ["system", "user", "assistant", "tool", "assistant"]
    assert json.loads(ep.messages[3].content) == {"item": "apple", "stock": 3}  # written by the policy
    assert [t.role for t in ep.turns] == [Role.ACT, Role.REHEARSE, Role.ACT] and ep.env_calls == 0
    assert phase.achieved == [False, False]
    assert reh.memory.split() == ["Memory-1:", "check", "the", "apple", "stock", "first."] + ["word"] * 4  # 10 words
    act_seeds = [e["seed"] for e in pol.log if e["kind"] == "act" and len(e["messages"]) == 2]
    assert len(act_seeds) == 2 and act_seeds[0] != act_seeds[1]
    assert {e["temperature"] for e in pol.log} == {1.0}  # explore temperature on a copy
    assert pol.temperature == 0.0  # the caller's policy is untouched
    assert {e["max_tokens"] for e in pol.log if e["kind"] == "memory"} == {10}
    assert all(e["context"]["tts"] == "private" for e in pol.log)
    assert not any(EARLIER_HEADER in e["messages"][0]["content"] for e in pol.log if e["kind"] == "act")
    # no few-shot: the Rehearse prompt shows no reference pairs
    rehearse_prompt = next(e for e in pol.log if e["kind"] == "rehearse")["messages"][-1]["content"]
    assert '"response"' not in rehearse_prompt


def test_sequential_n2_second_sees_first_and_its_reflection(kit):
    pol = ScriptedChat()
    rehearse_chat(pol, MESSAGES, kit.TOOLS, TTSConfig(n=2, mode="sequential"), seed=1)
    firsts = [e for e in pol.log if e["kind"] == "act" and e["messages"][-1]["role"] == "user"]
    assert len(firsts) == 2 and EARLIER_HEADER not in firsts[0]["messages"][0]["content"]
    second = firsts[1]["messages"][0]["content"]
    assert second.startswith("You manage a shop.") and EARLIER_HEADER in second
    assert "Attempt review #1" in second and "Tool[get_stock]" in second and "Attempt 2:" not in second


def test_limits_and_terminations_are_the_machines(kit):
    pol = ScriptedChat(calls_forever=True)
    cfg = chat_rollout_config(pol, max_steps=8).model_copy(update={"max_calls_per_turn": 3})
    (phase,) = rehearse_chat(pol, MESSAGES, kit.TOOLS, ONE, seed=0, cfg=cfg).phases
    assert phase.rehearsals[0].termination is TerminationReason.MAX_CALLS
    assert len(phase.rehearsals[0].turns_of(Role.REHEARSE)) == 3
    tight = cfg.model_copy(update={"max_context_tokens": 300})
    (phase,) = rehearse_chat(pol, MESSAGES, kit.TOOLS, ONE, seed=0, cfg=tight).phases
    assert phase.rehearsals[0].termination is TerminationReason.CONTEXT_LIMIT
    bad = ScriptedChat(rehearsed="the stock is probably 3")
    (phase,) = rehearse_chat(bad, MESSAGES, kit.TOOLS, ONE, seed=0).phases
    ep = phase.rehearsals[0]
    assert ep.termination is TerminationReason.REHEARSE_ERROR
    assert "NO_EXECUTION_RESULT_TAG_FOUND" in ep.messages[-1].content


def test_a_reply_the_policy_marked_malformed_is_an_invalid_call(kit):
    class Broken(ScriptedChat):
        def reply(self, messages, tools, *, seed=None, context=None):
            if SEC_CURRENT in (messages[-1]["content"] or "") or ASSESS_MARK in (messages[-1]["content"] or ""):
                return super().reply(messages, tools, seed=seed, context=context)
            return AssistantReply(content="<tool_call>{oops", parse_error=ErrorCode.JSON_DECODE, detail="bad")

    end = chat_rollout_config(Broken(), max_steps=8).model_copy(update={"invalid_call": "end"})
    (phase,) = rehearse_chat(Broken(), MESSAGES, kit.TOOLS, ONE, seed=0, cfg=end).phases
    assert phase.rehearsals[0].termination is TerminationReason.INVALID_TOOL_CALL
    # the default (observe): the parser's error is shown and the policy keeps trying, as with a real world
    (phase,) = rehearse_chat(Broken(), MESSAGES, kit.TOOLS, ONE, seed=0).phases
    ep = phase.rehearsals[0]
    assert ep.termination is TerminationReason.MAX_TURNS and len(ep.turns_of(Role.ACT)) > 1


def test_tts_policy_rehearses_per_episode_and_commits_with_memory(kit):
    pol = ScriptedChat()
    wrapped = TTSPolicy(pol, TTSConfig(n=2), seed=3)
    ctx = {"benchmark": "x", "entry_id": "e1", "sample": 0}
    r1 = wrapped.reply(MESSAGES, kit.TOOLS, seed=9, context=ctx)
    n_private = len(pol.log) - 1
    assert sorted(e["kind"] for e in pol.log[:n_private]) == sorted(["act", "rehearse", "act"] * 2
                                                                    + ["assess"] * 2 + ["memory"])
    commit = pol.log[-1]
    assert commit["context"] == ctx and commit["temperature"] == 0.0 and commit["seed"] == 9
    system = commit["messages"][0]["content"]
    assert MEMORY_HEADER in system and "Memory-1" in system
    # later queries of the same episode without a new user message reuse the memory; a new entry rehearses
    history = MESSAGES + [r1.to_message(), {"role": "tool", "tool_call_id": "c1", "content": "{}"}]
    wrapped.reply(history, kit.TOOLS, context={**ctx, "step": 1})
    assert len(pol.log) == n_private + 2
    wrapped.reply(MESSAGES, kit.TOOLS, context={**ctx, "entry_id": "e2"})
    assert len(pol.log) == 2 * n_private + 3 and len(wrapped.rehearsals) == 2


def test_tts_policy_every_turn_rehearses_again_with_memory_carried(kit):
    pol = ScriptedChat()
    wrapped = TTSPolicy(pol, TTSConfig(n=1, rehearse_at="every"), seed=3)
    ctx = {"benchmark": "x", "entry_id": "e1", "sample": 0}
    r1 = wrapped.reply(MESSAGES, kit.TOOLS, context=ctx)
    history = MESSAGES + [r1.to_message(), {"role": "tool", "tool_call_id": "c1", "content": "{}"},
                          {"role": "assistant", "content": "3 apples."}, {"role": "user", "content": "And pears?"}]
    wrapped.reply(history, kit.TOOLS, context=ctx)
    memories = [e for e in pol.log if e["kind"] == "memory"]
    assert len(memories) == 2 and "Memory-1" in memories[1]["messages"][-1]["content"]
    assert [ph.user_turn for ph in wrapped.rehearsals[json_key(ctx)].phases] == [0, 1]
    last_system = pol.log[-1]["messages"][0]["content"]
    assert "Memory-2" in last_system and "Memory-1" not in last_system
    # the second private phase started from the said conversation, the new user message last
    second_acts = [e for e in pol.log if e["kind"] == "act" and e["context"].get("tts") == "private"][-1]
    assert "And pears?" in json.dumps(second_acts["messages"])


def json_key(ctx):
    from envace.tts.chat import episode_key

    return episode_key([], ctx)


def test_n0_wrapper_is_the_plain_policy(kit):
    pol = ScriptedChat()
    TTSPolicy(pol, TTSConfig(n=0, mode="sequential")).reply(MESSAGES, kit.TOOLS, seed=4)
    assert len(pol.log) == 1 and pol.log[0]["messages"] == MESSAGES


def test_committed_chat_episode_after_the_private_phase(kit):
    pol = ScriptedChat()
    made = []

    def factory():
        if not any(e["kind"] == "memory" for e in pol.log):
            raise AssertionError("environment requested during the private phase")
        made.append((len(pol.log), kit.ShopEnv()))
        return made[-1][1]

    task = kit.make_task("t", ["How many apples?"], {"apple": 5, "pear": 1})
    (traj,) = tts_chat_episode(pol, task, factory, TTSConfig(n=2, mode="sequential"), seed=0)
    # every generation before the environment existed was private (explore temperature), none after it
    assert len(made) == 1 and [e["temperature"] for e in pol.log[:made[0][0]]] == [1.0] * made[0][0]
    assert {(e["kind"], e["temperature"]) for e in pol.log[made[0][0]:]} == {("act", 0.0)}
    env = made[0][1]
    assert [c.name for c in env.executed] == ["get_stock"] and traj.env_calls == 1
    assert json.loads(traj.messages[3].content) == {"item": "apple", "stock": 5}  # the real answer
    assert traj.termination is TerminationReason.FINAL_REPLY and MEMORY_HEADER in traj.messages[0].content
    assert len(traj.tts["private"]) == 2 and traj.tts["n"] == 2


def test_openai_messages_link_calls_and_results():
    msgs = [{"role": "user", "content": "q"},
            {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {
                "name": "a", "arguments": {"x": 1}}}, {"type": "function", "function": {
                "name": "b", "arguments": {}}}]},
            {"role": "tool", "content": "1", "name": "a"}, {"role": "tool", "content": "2", "name": "b"}]
    out = openai_messages(msgs)
    assert [c["id"] for c in out[1]["tool_calls"]] == ["call_0", "call_1"]
    assert out[1]["tool_calls"][0]["function"]["arguments"] == '{"x": 1}'
    assert [m["tool_call_id"] for m in out[2:]] == ["call_0", "call_1"]


def test_rollout_config_default_is_the_policys_temperature():
    pol = ScriptedChat()
    pol.temperature = 0.3
    cfg = chat_rollout_config(pol)
    assert isinstance(cfg, RolloutConfig) and cfg.act.temperature == 0.3 and cfg.few_shot is False
    assert isinstance(cfg.act, SamplingConfig)
