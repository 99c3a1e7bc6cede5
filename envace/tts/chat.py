"""Test-time rehearsal (TTS), chat level: the same method over a `BenchPolicy` (benchmarks, any endpoint),
on the same state machine as the token level: the policy is put behind `ChatPolicyEngine`
(envace.rollout.chat_engine) and the private phase is `envace.tts.private.rehearse_privately`, so episodes,
limits (turns, calls per user turn, context) and `TerminationReason`s are those of `run_rollout`.

- `rehearse_chat(policy, messages, tools, ...)`: the private phase for the conversation so far (ending
  with the user message to answer): N imagined Act + Rehearse episodes of the policy itself (Rehearse in
  the reference's "full" simulator chat, no few-shot), reviews, the memory m_x. No environment exists in
  it; it sees only `messages` and `tools`.
- `TTSPolicy`: a `BenchPolicy` wrapper for any benchmark. On the first query of an episode (keyed by
  the context's benchmark / entry / sample) it runs `rehearse_chat`; with `rehearse_at="every"` it
  rehearses again at each new user message (the earlier memory carried into the new one). Every query is
  answered with the latest m_x appended to the system prompt; the benchmark runs its own committed loop.
  Under `best_of_n` the first query after a private phase is answered with the chosen rehearsal's first
  Act output (its content and calls) instead of a new reply.
  The wrapper is only ever the agent: run_benchmarks gives the user simulator the un-wrapped policy or
  its own engine, so the memory never reaches it.
- `tts_chat_episode(policy, task, env_factory, ...)`: `tts_rollout` over the chat engine: private phase,
  then ONE committed episode against an `Environment` created only after the private phase returned.

Sampling: the private phase runs at the explore temperature, reviews and m_x at their token caps, applied
to copies of the policy when it has `temperature` / `max_tokens` (notes otherwise); the committed replies
use `commit_temperature` when set, else the policy's own settings. Departure: the chat-level rollout
config (`chat_rollout_config`) caps each Act / Rehearse reply at 1024 tokens.
"""

from __future__ import annotations

import copy
import hashlib
import json
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from envace.config import RolloutConfig, SamplingConfig
from envace.engines.reply import AssistantReply, BenchPolicy
from envace.roles.act import parse_act
from envace.rollout.chat_engine import ChatPolicyEngine
from envace.rollout.seeds import derive_seed
from envace.tts.config import TTSConfig
from envace.tts.phase import PrivatePhase, private_view
from envace.tts.private import rehearse_privately
from envace.tts.prompts import memory_note, openai_with_system_note
from envace.tts.rollout import tts_rollout
from envace.types import Environment, Message, Task, Trajectory, Turn


def chat_rollout_config(policy: BenchPolicy, *, max_steps: int = 8, max_context_tokens: int = 32768) -> RolloutConfig:
    """Limits and sampling of chat-level episodes: the policy's own temperature for Act (0 without one)."""
    t = float(getattr(policy, "temperature", 0.0) or 0.0)
    return RolloutConfig(mode="rehearse", act=SamplingConfig(temperature=t, max_new_tokens=1024),
                         rehearse=SamplingConfig(temperature=t, max_new_tokens=1024), max_assistant_turns=max_steps,
                         max_context_tokens=max_context_tokens, few_shot=False, rehearse_style="full")


def with_setting(policy: BenchPolicy, **settings: Any) -> tuple[BenchPolicy, list[str]]:
    """A shallow copy of `policy` with the given attributes set, for those it has; notes for the rest."""
    have = {k: v for k, v in settings.items() if hasattr(policy, k)}
    missing = [f"{type(policy).__name__} has no {k!r}; used as is" for k in settings if k not in have]
    if not have:
        return policy, missing
    out = copy.copy(policy)
    for k, v in have.items():
        setattr(out, k, v)
    return out, missing


def to_messages(msgs: list[dict[str, Any]]) -> list[Message]:
    out = []
    for m in msgs:
        try:
            out.append(Message.from_openai(m))
        except (KeyError, TypeError, ValueError):  # untrusted arguments text: keep the visible content
            out.append(Message(role=str(m.get("role", "user")), content=str(m.get("content") or "")))
    return out


def replay_reply(turn: Turn, tools: list[dict[str, Any]]) -> AssistantReply:
    """A rehearsal's Act output as the reply the benchmark's committed loop receives (best_of_n)."""
    parsed = parse_act(turn.text, tools)
    return AssistantReply(content=parsed.content or "", tool_calls=list(turn.tool_calls))


@dataclass
class ChatRehearsal:
    """The private phases of one benchmark episode (one per rehearsed user message)."""

    tts: TTSConfig
    phases: list[PrivatePhase] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    replay: AssistantReply | None = None  # best_of_n: the next reply of the committed loop, not yet given

    @property
    def memory(self) -> str:
        return next((ph.memory for ph in reversed(self.phases) if ph.memory), "")

    @property
    def user_turn(self) -> int:
        return self.phases[-1].user_turn if self.phases else -1

    def summary(self) -> dict[str, Any]:
        return {"n": self.tts.n, "mode": self.tts.mode.value, "memory_strategy": self.tts.memory,
                "memory": self.memory, "notes": list(self.notes),
                "phases": [ph.summary() for ph in self.phases],
                "episodes": [{"user_turn": ph.user_turn, "termination": t.termination.value if t.termination else None,
                              "seed": s, "assessment": a, "achieved": ok,
                              "steps": sum(m.role == "assistant" for m in t.messages)}
                             for ph in self.phases
                             for t, s, a, ok in zip(ph.rehearsals, ph.seeds, ph.assessments, ph.achieved)]}


def rehearse_chat(policy: BenchPolicy, messages: list[dict[str, Any]], tools: list[dict[str, Any]], tts: TTSConfig,
                  *, seed: int, cfg: RolloutConfig | None = None, context: Mapping[str, Any] | None = None,
                  memory: str = "") -> ChatRehearsal:
    """The private phase for the conversation `messages` (ending with a user message). `memory` is the
    memory of earlier user turns, carried into the new one."""
    out = ChatRehearsal(tts=tts)
    said = to_messages(messages)
    if tts.n == 0:
        return out
    if not said or said[-1].role != "user":
        out.notes.append("no user message to rehearse (the conversation does not end with one); not rehearsed")
        return out
    engine = ChatPolicyEngine(policy, context={**(context or {}), "tts": "private"})
    view = private_view(Task(uuid="chat", tools=list(tools), messages=[]), said)
    (phase,) = rehearse_privately([view], engine, cfg or chat_rollout_config(policy), tts, seed=seed,
                                  memories=[memory], user_turns=[sum(m.role == "user" for m in said) - 1])
    out.phases.append(phase)
    out.replay = replay_reply(phase.replay, tools) if phase.replay is not None else None
    out.notes += engine.notes
    return out


def episode_key(messages: list[dict[str, Any]], context: Mapping[str, Any] | None) -> str:
    """Which episode a query belongs to: the context's benchmark / entry / sample, else the first request."""
    ctx = dict(context or {})
    parts = [ctx.get(k) for k in ("benchmark", "category", "domain", "entry_id", "task_id", "sample")]
    if any(p is not None for p in parts):
        return json.dumps(parts, default=str)
    first = next((str(m.get("content")) for m in messages if m.get("role") == "user"), "")
    return "request:" + hashlib.sha256(first.encode()).hexdigest()[:16]


class TTSPolicy:
    """`BenchPolicy` that rehearses privately before answering (see module doc)."""

    def __init__(self, policy: BenchPolicy, tts: TTSConfig, *, seed: int = 0, cfg: RolloutConfig | None = None) -> None:
        self.inner, self.tts, self.seed = policy, tts, seed
        self.cfg = cfg or chat_rollout_config(policy)
        self.commit_policy, self.notes = policy, []
        if tts.commit_temperature is not None:
            self.commit_policy, self.notes = with_setting(policy, temperature=tts.commit_temperature)
        self.name = f"{getattr(policy, 'name', type(policy).__name__)} + TTS({tts.label()})"
        self.rehearsals: dict[str, ChatRehearsal] = {}
        self._lock = threading.Lock()

    def _due(self, reh: ChatRehearsal | None, messages: list[dict[str, Any]]) -> bool:
        if not messages or messages[-1].get("role") != "user":
            return False
        if reh is None:
            return True
        users = sum(m.get("role") == "user" for m in messages)
        return self.tts.rehearse_at == "every" and users - 1 > reh.user_turn

    def reply(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], *, seed: int | None = None,
              context: Mapping[str, Any] | None = None) -> AssistantReply:
        if self.tts.n > 0:
            key = episode_key(messages, context)
            with self._lock:
                reh = self.rehearsals.get(key)
            if self._due(reh, messages):
                turn = sum(m.get("role") == "user" for m in messages) - 1
                new = rehearse_chat(self.inner, messages, tools, self.tts, seed=derive_seed(self.seed, key, turn),
                                    cfg=self.cfg, context=context, memory=reh.memory if reh else "")
                with self._lock:
                    reh = self.rehearsals.setdefault(key, ChatRehearsal(tts=self.tts))
                    reh.phases += new.phases
                    reh.notes += [note for note in new.notes if note not in reh.notes]
                    reh.replay = new.replay
            if reh is not None and reh.replay is not None:
                with self._lock:
                    replay, reh.replay = reh.replay, None
                if replay is not None:
                    return replay
            if reh is not None and reh.memory:
                messages = openai_with_system_note(messages, memory_note(reh.memory))
        return self.commit_policy.reply(messages, tools, seed=seed, context=context)


def tts_chat_episode(policy: BenchPolicy, task: Task, env_factory: Callable[[], Environment], tts: TTSConfig, *,
                     seed: int, cfg: RolloutConfig | None = None, k: int = 1) -> list[Trajectory]:
    """`tts_rollout` over the chat engine: k attempts of N private rehearsals, then one committed episode
    against the real environment (created only after the first private phase returned)."""
    engine = ChatPolicyEngine(policy, context={"tts": "episode"})
    return tts_rollout([task], engine, cfg or chat_rollout_config(policy), tts, env_factory, seed, k=k)
