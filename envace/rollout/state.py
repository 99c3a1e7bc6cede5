"""Per-episode state of the rollout state machine.

An episode moves through four phases: ACT (the policy writes its next Act output) → OBSERVE (each
pending tool call gets an observation: rehearsed, executed or simulated) → back to ACT, or NEXT_USER
(the next user turn is replayed from the task) → ACT, until DONE with a TerminationReason.
`EpisodeState` holds everything a handler needs: the Trajectory under construction, the Act history
(the same list as `trajectory.messages`), the pending calls, the user-turn index and counters.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from envace.types import Environment, Message, Observation, TerminationReason, ToolCall, Trajectory


class Phase(str, Enum):
    ACT = "act"
    OBSERVE = "observe"
    NEXT_USER = "next_user"
    DONE = "done"


@dataclass
class EpisodeState:
    traj: Trajectory
    phase: Phase = Phase.ACT
    env: Environment | None = None  # the real environment (env mode only)
    shadow_env: Environment | None = None  # real env used only to record rehearsal fidelity
    user_turn: int = 0  # 0-based index into task.user_turns of the turn being answered
    pending: list[ToolCall] = field(default_factory=list)  # calls of the latest Act output
    latest_act_text: str = ""  # raw text of the latest Act output (shown to Rehearse)
    latest_act_turn: int = 0  # Turn.id of the latest Act output (the Act turn its Rehearse turns answer)
    act_context_len: int = 0  # history length before the latest Act output (Rehearse's transcript)
    assistant_turns: int = 0  # Act generations so far
    calls_this_turn: int = 0  # tool calls within the current user turn
    rehearse_generations: int = 0  # Rehearse generations so far (seeds)

    @property
    def history(self) -> list[Message]:
        """The Act history: the conversation as the Act role sees it."""
        return self.traj.messages

    @property
    def done(self) -> bool:
        return self.phase is Phase.DONE

    def finish(self, reason: TerminationReason) -> Phase:
        self.traj.termination = reason
        self.pending = []
        return Phase.DONE

    def add_observation(self, call: ToolCall | None, obs: Observation) -> None:
        """Append one tool response to the Act history."""
        self.traj.messages.append(Message(role="tool", content=obs.to_text(), name=call.name if call else None))
