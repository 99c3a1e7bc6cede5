"""The frozen simulator's seat in the rollout (mode=simulator): how its prompt is built and its reply read, and
the engine behind a simulator model slot.

`rollout.simulator_prompt=rehearse` (default) asks the simulator exactly as rehearse mode asks the policy
(envace.roles.rehearse: the Rehearse prompt of `rehearse_style`, the strict `<execution_result>` parser), for
a simulator trained on that format. `prompted` asks it as the prompted simulator
(envace.roles.prompted_simulator): its system prompt, and one user message holding the task's tool schemas,
the same tool's (arguments, response) few-shot pairs when `few_shot` is on (the Rehearse prompt's few-shot
source, envace.roles.rehearse.few_shot_triples), the conversation the Act output answered (the system message
left out, as the Rehearse transcript leaves it out) and the call; the reply is read by the lenient
`simulated_observation`. Either way the stored turn is what happened: the prompt sent, the raw reply, the
parsed observation, and `trainable=False` (a frozen simulator's turns are never training rows).

`simulator_engine` builds the engine of a slot: an endpoint's chat API (`ChatTextEngine`), or a local dir's
model with its own tokenizer (its prompts rendered by its own chat template).
"""

from __future__ import annotations

from typing import Any

from envace.engines.slots import ModelSlot, SlotKind
from envace.roles.prompted_simulator import prompted_messages, simulated_observation
from envace.roles.rehearse import few_shot_triples, parse_execution_result
from envace.rollout.chat_engine import ChatTextEngine
from envace.types import Message, Observation, Task, ToolCall

SIMULATOR_PROMPTS: tuple[str, ...] = ("rehearse", "prompted")

__all__ = ["SIMULATOR_PROMPTS", "prompted_seat_messages", "read_reply", "simulator_engine"]


def prompted_seat_messages(task: Task, history: list[Message], call: ToolCall, *,
                           few_shot: bool) -> list[dict[str, Any]]:
    """The prompted simulator's chat for one pending call of a rollout episode (module docstring)."""
    examples = [(a, r) for n, a, r in few_shot_triples(task) if n == call.name] if few_shot else []
    return prompted_messages(task.tools, [m.to_openai() for m in history if m.role != "system"],
                             {"name": call.name, "arguments": call.arguments}, examples)


def read_reply(text: str, prompted: bool) -> Observation:
    """The observation of one simulator (or Rehearse) reply: the lenient prompted reader, or the strict parser."""
    return simulated_observation(text) if prompted else parse_execution_result(text)


def simulator_engine(slot: ModelSlot, device: str | None = None, *, role: str = "simulator") -> Any:
    """The GenerationEngine of a simulator slot (module docstring); `role` names the slot in its errors."""
    if slot.kind is SlotKind.ENDPOINT:
        return ChatTextEngine(slot.build_client(role), name=f"endpoint:{slot.label()}")
    return slot.build_chat_model(role, device=device).engine
