"""Test-time rehearsal (TTS), chat level: the same method over a `BenchPolicy` (benchmarks, any endpoint).

- `rehearse_chat(policy, messages, tools, ...)`: the private phase for one request. Each rehearsal is a
  full Act + Rehearse episode: the policy answers as the assistant with the benchmark's tools; each tool
  call is answered by the same policy playing Rehearse through the simulator chat of
  envace.roles.rehearse (`rehearse_messages`, parsed by `parse_execution_result`); the episode ends at
  the first reply without a call (the answer to the request), a rehearsed error, a malformed call or
  `max_steps`. Then a self-assessment per episode and the memory m_x (tts_prompts). Its signature has
  no environment: nothing here can reach a real one.
- `TTSPolicy`: a `BenchPolicy` wrapper for any benchmark. On the first query of an episode (keyed by the
  context's benchmark / entry / sample) it runs `rehearse_chat` on the conversation so far (the
  benchmark's prompt: no environment output exists yet), then answers every query of that episode with
  m_x appended to the system prompt. The benchmark keeps running its own committed loop.
- `tts_chat_episode(policy, messages, tools, env_factory, ...)`: private phase, then ONE committed chat
  episode against an `Environment` created only after the private phase returned (the tool world, or any
  envace Environment).

Sampling: a BenchPolicy fixes its temperature; the explore and commit temperatures are applied to
copies of the policy when it has a `temperature` attribute (OpenAIPolicy, HFChatPolicy), otherwise the
policy is used as it is and `ChatRehearsal.notes` says so. Departures: as in tts.py (N counts attempts;
our prompts); rehearsal happens before the first query of an episode only (later user turns of a
multi-turn benchmark reuse the same m_x); reviews and m_x are capped by the policy's `max_tokens` when
it has one, and m_x is cut to `memory_max_tokens` whitespace words otherwise.
"""

from __future__ import annotations

import copy
import hashlib
import json
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from envace.benchmarks.base import AssistantReply, BenchPolicy
from envace.roles.rehearse import parse_execution_result, rehearse_messages, transcript
from envace.rollout.seeds import derive_seed
from envace.rollout.tts import TTSConfig, check_tts
from envace.rollout.tts_prompts import (
    assess_prompt,
    earlier_attempts_note,
    memory_note,
    memory_prompt,
    parse_achieved,
    with_system_note,
)
from envace.toolcall import render_tool_call, strip_think
from envace.types import Environment, ErrorCode, Message, Observation, Role, Task, ToolCall


@dataclass
class ChatEpisode:
    messages: list[dict[str, Any]]  # OpenAI messages, the conversation prefix included
    termination: str  # final_reply | rehearse_error | invalid_call | max_steps
    seed: int
    assessment: str = ""
    achieved: bool | None = None


@dataclass
class ChatRehearsal:
    """The private phase of one request."""

    n: int
    mode: str
    episodes: list[ChatEpisode] = field(default_factory=list)
    memory: str = ""
    notes: list[str] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        return {"n": self.n, "mode": self.mode, "memory": self.memory, "notes": list(self.notes),
                "episodes": [{"termination": e.termination, "seed": e.seed, "assessment": e.assessment,
                              "achieved": e.achieved, "steps": sum(m["role"] == "assistant" for m in e.messages)}
                             for e in self.episodes]}


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


def _messages(msgs: list[dict[str, Any]]) -> list[Message]:
    out = []
    for m in msgs:
        try:
            out.append(Message.from_openai(m))
        except (KeyError, TypeError, ValueError):  # untrusted arguments text: keep the visible content
            out.append(Message(role=str(m.get("role", "user")), content=str(m.get("content") or "")))
    return out


def _act_text(reply: AssistantReply) -> str:
    return "\n".join([reply.content] * bool(reply.content) + [render_tool_call(c) for c in reply.tool_calls])


def _request(messages: list[dict[str, Any]]) -> str:
    return "\n".join(str(m.get("content") or "") for m in messages if m.get("role") == "user")


def _cap_words(text: str, limit: int) -> str:
    words = text.split()
    return text if len(words) <= limit else " ".join(words[:limit])


def imagine_episode(policy: BenchPolicy, messages: list[dict[str, Any]], tools: list[dict[str, Any]], *, seed: int,
                    max_steps: int = 8, context: Mapping[str, Any] | None = None) -> ChatEpisode:
    """One private Act + Rehearse episode from the conversation prefix `messages`. Never raises on model output."""
    msgs = [dict(m) for m in messages]
    task = Task(uuid="tts-chat", tools=list(tools), messages=_messages(messages))
    ctx = {**(context or {}), "tts": "private"}
    for step in range(max_steps):
        reply = policy.reply(msgs, tools, seed=derive_seed(seed, "act", step),
                             context={**ctx, "role": "act", "step": step})
        msgs.append(reply.to_message())
        if reply.parse_error is not None:
            return ChatEpisode(msgs, "invalid_call", seed)
        if not reply.tool_calls:
            return ChatEpisode(msgs, "final_reply", seed)
        history = _messages(msgs[:-1])
        for j, call in enumerate(reply.tool_calls):
            chat = rehearse_messages(task, history, _act_text(reply), call, few_shot=True, style="full")
            sim = policy.reply(chat, [], seed=derive_seed(seed, "rehearse", step, j),
                               context={**ctx, "role": "rehearse", "step": step, "call": j})
            obs = parse_execution_result(sim.content if not sim.tool_calls else _act_text(sim))
            msgs.append({"role": "tool", "tool_call_id": call.id or f"call_{j}", "name": call.name,
                         "content": obs.to_text()})
            if not obs.ok:
                return ChatEpisode(msgs, "rehearse_error", seed)
    return ChatEpisode(msgs, "max_steps", seed)


def _note(policy: BenchPolicy, prompt: str, seed: int, ctx: Mapping[str, Any]) -> str:
    reply = policy.reply([{"role": "user", "content": prompt}], [], seed=seed, context=ctx)
    return strip_think(reply.content or "").strip()


def rehearse_chat(policy: BenchPolicy, messages: list[dict[str, Any]], tools: list[dict[str, Any]], *, n: int,
                  mode: str, seed: int, options: TTSConfig | None = None, max_steps: int = 8,
                  context: Mapping[str, Any] | None = None) -> ChatRehearsal:
    """The private phase for the request in `messages`: N-1 imagined episodes, reviews, memory m_x."""
    check_tts(n, mode)
    opts = options or TTSConfig()
    out = ChatRehearsal(n=n, mode=mode)
    if n == 1:
        return out
    explore, notes = with_setting(policy, temperature=opts.explore_temperature)
    out.notes += notes
    reviewer, _ = with_setting(explore, max_tokens=opts.assess_max_tokens)
    ctx = {**(context or {}), "tts": "private"}
    request = _request(messages)
    for attempt in range(n - 1):
        shown = messages
        if mode == "sequential" and out.episodes:
            shown = with_system_note(messages, earlier_attempts_note(
                [transcript(_messages(e.messages)) for e in out.episodes], [e.assessment for e in out.episodes],
                opts.transcript_max_chars))
        ep = imagine_episode(explore, shown, tools, seed=derive_seed(seed, "tts-private", attempt),
                             max_steps=max_steps, context={**ctx, "attempt": attempt})
        # the review sees the request and what happened after the prefix it was given
        ep.assessment = _note(reviewer, assess_prompt(request, transcript(_messages(ep.messages[len(shown):])),
                                                      opts.transcript_max_chars),
                              derive_seed(seed, "tts-assess", attempt), {**ctx, "role": "assess", "attempt": attempt})
        ep.achieved = parse_achieved(ep.assessment)
        out.episodes.append(ep)
    writer, _ = with_setting(explore, max_tokens=opts.memory_max_tokens)
    prompt = memory_prompt(request, [transcript(_messages(e.messages)) for e in out.episodes],
                           [e.assessment for e in out.episodes], opts.memory_words,
                           max(opts.transcript_max_chars // len(out.episodes), 40))
    out.memory = _cap_words(_note(writer, prompt, derive_seed(seed, "tts-memory"), {**ctx, "role": "memory"}),
                            opts.memory_max_tokens)
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
    """`BenchPolicy` that rehearses privately before the first query of each episode (see module doc)."""

    def __init__(self, policy: BenchPolicy, n: int, mode: str, *, seed: int = 0, options: TTSConfig | None = None,
                 max_steps: int = 8) -> None:
        check_tts(n, mode)
        self.inner, self.n, self.mode, self.seed = policy, n, mode, seed
        self.options = options or TTSConfig()
        self.max_steps = max_steps
        self.commit_policy, notes = with_setting(policy, temperature=self.options.commit_temperature)
        self.notes = list(notes)
        self.name = f"{getattr(policy, 'name', type(policy).__name__)} + TTS(N={n}, {mode})"
        self.rehearsals: dict[str, ChatRehearsal] = {}
        self._lock = threading.Lock()

    def reply(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], *, seed: int | None = None,
              context: Mapping[str, Any] | None = None) -> AssistantReply:
        if self.n > 1:
            key = episode_key(messages, context)
            with self._lock:
                reh = self.rehearsals.get(key)
            if reh is None:
                reh = rehearse_chat(self.inner, messages, tools, n=self.n, mode=self.mode,
                                    seed=derive_seed(self.seed, key), options=self.options,
                                    max_steps=self.max_steps, context=context)
                with self._lock:
                    reh = self.rehearsals.setdefault(key, reh)
            if reh.memory:
                messages = with_system_note(messages, memory_note(reh.memory))
        return self.commit_policy.reply(messages, tools, seed=seed, context=context)


@dataclass
class ChatTTSOutcome:
    rehearsal: ChatRehearsal
    messages: list[dict[str, Any]]  # the committed conversation (memory in its system prompt)
    termination: str
    env: Environment
    env_calls: int


def tts_chat_episode(policy: BenchPolicy, messages: list[dict[str, Any]], tools: list[dict[str, Any]],
                     env_factory: Callable[[], Environment], task: Task, *, n: int, mode: str, seed: int,
                     options: TTSConfig | None = None, max_steps: int = 8) -> ChatTTSOutcome:
    """Private phase on `messages`, then one committed episode whose calls the real environment executes
    (created by `env_factory` and reset with `task` only after the private phase returned)."""
    opts = options or TTSConfig()
    reh = rehearse_chat(policy, messages, tools, n=n, mode=mode, seed=seed, options=opts, max_steps=max_steps)
    env = env_factory()
    env.reset(task)
    committer, _ = with_setting(policy, temperature=opts.commit_temperature)
    msgs = with_system_note(messages, memory_note(reh.memory)) if reh.memory else [dict(m) for m in messages]
    calls, termination = 0, "max_steps"
    for step in range(max_steps):
        reply = committer.reply(msgs, tools, seed=derive_seed(seed, "commit", step),
                                context={"tts": "commit", "role": "act", "step": step})
        msgs.append(reply.to_message())
        if not reply.tool_calls:
            termination = "final_reply" if reply.parse_error is None else "invalid_call"
            break
        for j, call in enumerate(reply.tool_calls):
            obs = _execute(env, call)
            calls += 1
            msgs.append({"role": "tool", "tool_call_id": call.id or f"call_{j}", "name": call.name,
                         "content": obs.to_text()})
    return ChatTTSOutcome(reh, msgs, termination, env, calls)


def _execute(env: Environment, call: ToolCall) -> Observation:
    try:
        return env.execute(call)
    except Exception as exc:  # the arguments come from the model: a crash is an observation
        return Observation(content=None, source=Role.ENV, error=ErrorCode.TOOL_ERROR,
                           detail=f"{type(exc).__name__}: {exc}")
