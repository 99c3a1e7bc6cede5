"""The two roles of the one policy: Act (call tools / reply) and Rehearse (simulate a tool's response), and the
prompted simulator (prompted_simulator.py: any chat model told to be the tool, in the Rehearse role's seats).

Each role module builds its prompt and parses its output; parsing never raises on model output.
"""

from envace.roles.act import act_prompt_ids, assistant_message, is_malformed, parse_act
from envace.roles.prompted_simulator import parse_simulated, prompted_messages, simulated_observation
from envace.roles.prompts import simulator_system_prompt
from envace.roles.rehearse import (
    few_shot_triples,
    parse_execution_result,
    rehearse_messages,
    rehearse_prompt_ids,
    render_execution_result,
)

__all__ = [
    "act_prompt_ids",
    "assistant_message",
    "few_shot_triples",
    "is_malformed",
    "parse_act",
    "parse_execution_result",
    "parse_simulated",
    "prompted_messages",
    "rehearse_messages",
    "rehearse_prompt_ids",
    "render_execution_result",
    "simulated_observation",
    "simulator_system_prompt",
]
