"""Typed records that cross module boundaries: roles, messages, tool calls, observations, turns,
trajectories, tasks and checklist items.

Roles are data (an enum on every turn and training row) so every loss term and metric can be split by
role. Messages use the OpenAI chat shape (`system` / `user` / `assistant` / `tool`) because that is what
chat templates, CM2 data and OpenAI-compatible servers speak; a `Turn` records which *policy role*
(Act or Rehearse) produced a generation.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any, Protocol, runtime_checkable


class Role(str, Enum):
    """Who produced a piece of text. ACT and REHEARSE are the two roles of the one policy."""

    SYSTEM = "system"
    USER = "user"
    ACT = "act"
    REHEARSE = "rehearse"
    ENV = "env"
    JUDGE = "judge"


class Mode(str, Enum):
    """Where observations come from during a rollout."""

    REHEARSE = "rehearse"  # EnvACE: the policy writes every observation (Rehearse role)
    ENV = "env"  # standard GRPO: a real Environment executes each call
    SIMULATOR = "simulator"  # act-only baseline: a separate frozen model plays Rehearse


class TerminationReason(str, Enum):
    FINAL_REPLY = "final_reply"  # last user turn answered without a tool call
    MAX_TURNS = "max_turns"  # assistant-turn limit reached
    MAX_CALLS = "max_calls_per_turn"  # too many tool calls within one user turn
    CONTEXT_LIMIT = "context_limit"  # the next prompt would not fit
    REHEARSE_ERROR = "rehearse_error"  # Rehearse wrote no result, or (error_observation=end_rehearsed) an error
    ERROR_OBSERVATION = "error_observation"  # an error observation in any mode (error_observation=end)
    REQUIRED_CHECK_FAILED = "required_check_failed"  # a required_for_next_turn checklist item failed
    JUDGE_ERROR = "judge_error"  # the judge could not score (recorded, never a silent 0)
    INVALID_TOOL_CALL = "invalid_tool_call"  # malformed Act call (invalid_call=end)


class ErrorCode(str, Enum):
    """Classification of everything that can go wrong with untrusted model output or a tool."""

    # Act output (tool-call parsing)
    NO_TOOL_CALL = "NO_TOOL_CALL"
    INVALID_TOOL_CALL_FORMAT = "INVALID_TOOL_CALL_FORMAT"  # unclosed / nested blocks
    JSON_DECODE = "JSON_DECODE"
    MISSING_NAME = "MISSING_NAME"
    MISSING_ARGUMENTS = "MISSING_ARGUMENTS"
    NON_SERIALIZABLE_ARGUMENTS = "NON_SERIALIZABLE_ARGUMENTS"
    UNKNOWN_TOOL = "TOOL_NOT_AVAILABLE"
    INVALID_PARAMETERS = "INVALID_PARAMETERS"
    # Rehearse output
    NO_EXECUTION_RESULT_TAG = "NO_EXECUTION_RESULT_TAG_FOUND"
    RESULT_JSON_DECODE = "SIMULATOR_JSON_DECODE_ERROR"
    RESULT_EMPTY = "SIMULATOR_EMPTY_RESULT"
    REHEARSED_ERROR = "REHEARSED_ERROR"  # the simulator itself answered with error_tool_call
    # Either role: over envace.untrusted.MAX_OUTPUT_CHARS, classified without being scanned
    OUTPUT_TOO_LONG = "OUTPUT_TOO_LONG"
    # Real environment
    TOOL_ERROR = "TOOL_ERROR"  # the tool raised (e.g. unknown item); an ordinary observation


@dataclass
class ToolCall:
    name: str
    arguments: dict[str, Any]
    id: str | None = None

    def to_openai(self) -> dict[str, Any]:
        out = {"type": "function", "function": {"name": self.name, "arguments": self.arguments}}
        if self.id:
            out["id"] = self.id
        return out

    @classmethod
    def from_openai(cls, d: dict[str, Any]) -> ToolCall:
        fn = d.get("function", d)
        args = fn.get("arguments", {})
        if isinstance(args, str):
            args = json.loads(args) if args.strip() else {}
        return cls(name=fn["name"], arguments=args, id=d.get("id"))

    def key(self) -> str:
        """Canonical string for comparing calls (name + sorted arguments)."""
        return f"{self.name}({json.dumps(self.arguments, sort_keys=True)})"


@dataclass
class Message:
    """One chat message in OpenAI shape. `role` is system | user | assistant | tool."""

    role: str
    content: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    name: str | None = None  # tool name for role == "tool"
    # assistant messages the policy sampled: its token ids, which later prompts carry verbatim
    # (token-in-token-out, envace.chat_tokens); not part of the OpenAI shape
    token_ids: list[int] | None = field(default=None, compare=False, repr=False)

    def to_openai(self) -> dict[str, Any]:
        out: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.tool_calls:
            out["tool_calls"] = [c.to_openai() for c in self.tool_calls]
        if self.name is not None:
            out["name"] = self.name
        return out

    @classmethod
    def from_openai(cls, d: dict[str, Any]) -> Message:
        return cls(
            role=d["role"],
            content=d.get("content") or "",
            tool_calls=[ToolCall.from_openai(c) for c in d.get("tool_calls") or []],
            name=d.get("name"),
        )


@dataclass
class Observation:
    """The response to one tool call, from the real environment (ENV), the policy (REHEARSE) or a
    frozen simulator. `content` is a JSON value; `error` is set when the call or result was bad."""

    content: Any
    source: Role = Role.ENV
    error: ErrorCode | None = None
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.error is None

    def agent_value(self) -> Any:
        """The JSON value the Act role sees for this observation: the content, or the error object when
        there is none. The one definition of that rule: the tool message, the store's fidelity pair and
        the dashboard all read it here."""
        if self.error is not None and self.content is None:
            return {"error_tool_call": {"code": self.error.value, "message": self.detail}}
        return self.content

    def to_text(self) -> str:
        """The tool message's text (key-sorted JSON of `agent_value`)."""
        return json.dumps(self.agent_value(), sort_keys=True)

    def to_dict(self) -> dict[str, Any]:
        """Storage form (JSON-ready; enums as their values); `from_dict` reads it back."""
        # `_value_` (the enum's documented sunder attribute): `.value` is a Python-level descriptor, ~10x
        # slower, and the store writer calls this for every observation it writes
        return {"content": self.content, "source": self.source._value_,
                "error": None if self.error is None else self.error._value_, "detail": self.detail}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Observation:
        try:
            return cls(content=d.get("content"), source=Role(d.get("source") or Role.ENV.value),
                       error=None if d.get("error") is None else ErrorCode(d["error"]), detail=d.get("detail") or "")
        except ValueError as exc:
            raise ValueError(f"stored observation {d!r}: {exc}; its source must be a Role value and its error "
                             f"an ErrorCode value (envace.types)") from None


@dataclass(frozen=True)
class CallRef:
    """The tool call a Rehearse (or frozen simulator) turn answers: the answering turn's Act turn (its
    `Turn.id`) and the call's position among that Act output's calls. Recorded by the rollout, which
    knows the pairing, so nothing downstream has to re-pair turns by order."""

    act_turn: int
    call_index: int


@dataclass
class Turn:
    """One generation by the policy (or a frozen simulator): the one record of it from the engine to the
    dashboard. A training row is a view over it (its advantage is set here), the store writes it and
    reads it back with the same `id`, `answers` link, `observation` and `call`.

    Rehearse turns: `observation` is the rollout's one strict parse of `text` (fidelity is computed from
    it, never from a second parse), `call` the call it answers and `answers` where that call sits."""

    role: Role
    prompt_ids: list[int]
    response_ids: list[int]
    logprobs: list[float]
    text: str
    temperature: float
    user_turn: int = 0  # which user turn of the task this generation belongs to
    tool_calls: list[ToolCall] = field(default_factory=list)  # parsed (Act only)
    parse_error: ErrorCode | None = None  # Act: malformed call; Rehearse: malformed result
    observation: Observation | None = None  # Rehearse: the rehearsed result
    real_observation: Observation | None = None  # the real env's answer to the same call, if known
    call: ToolCall | None = None  # Rehearse: the call being simulated
    trainable: bool = True  # False for a frozen simulator's generations
    advantage: float | None = None  # set by the trainer on the trainable turns it trains on
    id: int | None = None  # position in its trajectory's `turns` (Trajectory.add_turn); stored as is
    answers: CallRef | None = None  # Rehearse / simulator: the Act turn and call index answered


@dataclass
class ChecklistItem:
    """A CM2 checklist item. `extra_info` may carry a machine-checkable `rule` for the rule judge."""

    id: str
    question: str
    pass_condition: str = ""
    focus_on: str = "assistant.tool_calls"
    weight: float = 1.0
    required_for_next_turn: bool = False
    evidence: list[dict[str, Any]] = field(default_factory=list)
    failure_examples: list[str] = field(default_factory=list)
    dependence: list[str] = field(default_factory=list)
    extra_info: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Task:
    """One prompt x: the tools, the reference conversation (user turns are replayed from it; its
    (call, response) pairs serve as Rehearse few-shot), and per-user-turn checklists."""

    uuid: str
    tools: list[dict[str, Any]]  # OpenAI function schemas
    messages: list[Message]  # full reference conversation (gold), starting with system/user
    checklists: list[list[ChecklistItem]] = field(default_factory=list)  # one list per user turn
    domain: str = ""
    initial_state: dict[str, Any] | None = None  # tool-world database at reset
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def user_turns(self) -> list[str]:
        return [m.content for m in self.messages if m.role == "user"]

    @property
    def system_prompt(self) -> str | None:
        return self.messages[0].content if self.messages and self.messages[0].role == "system" else None

    def tool_names(self) -> list[str]:
        return [t["function"]["name"] if "function" in t else t["name"] for t in self.tools]

    def gold_calls(self) -> list[list[ToolCall]]:
        """Reference tool calls grouped by user turn."""
        out: list[list[ToolCall]] = []
        for m in self.messages:
            if m.role == "user":
                out.append([])
            elif m.role == "assistant" and out:
                out[-1].extend(m.tool_calls)
        return out


@dataclass
class EchoPrompt:
    """An env-mode call seen as a Rehearse task (the `echo` arm, envace.trainers.arms.echo): the Rehearse prompt a
    rehearse-mode episode would have built for this call at this point, and the real environment's answer,
    whose rendered text is the cross-entropy target. Recorded by the rollout only when asked
    (`run_rollout(echo_prompts=True)`); never shown to the policy."""

    prompt_ids: list[int]
    call: ToolCall
    observation: Observation  # the real environment's answer (what Act saw)
    user_turn: int = 0
    answers: CallRef | None = None  # the Act turn and call index it answers


@dataclass
class Trajectory:
    task: Task
    prompt_index: int
    sample_index: int
    mode: Mode
    messages: list[Message] = field(default_factory=list)  # the conversation as the Act role saw it
    turns: list[Turn] = field(default_factory=list)
    termination: TerminationReason | None = None
    reward: float | None = None  # None = unscored; left out of group baselines
    reward_breakdown: dict[str, Any] = field(default_factory=dict)
    env_calls: int = 0  # calls executed by a real environment during the rollout
    # test-time rehearsal of a committed run (envace.tts.rollout): n, mode, reviews, memory and the
    # private trajectories under "private" (store them with mode tts-private); None for a plain rollout
    tts: dict[str, Any] | None = None
    echo: list[EchoPrompt] = field(default_factory=list)  # env mode with echo_prompts: one per executed call

    def turns_of(self, role: Role) -> list[Turn]:
        return [t for t in self.turns if t.role == role]

    def add_turn(self, turn: Turn) -> Turn:
        """Append `turn`, giving it its stable id (its position in `turns`)."""
        turn.id = len(self.turns)
        self.turns.append(turn)
        return turn


@runtime_checkable
class Environment(Protocol):
    """A real environment for one episode: the tool world, a benchmark backend, a replay server."""

    def reset(self, task: Task) -> None: ...

    def execute(self, call: ToolCall) -> Observation: ...

    def final_reward(self, trajectory: Trajectory) -> float: ...
