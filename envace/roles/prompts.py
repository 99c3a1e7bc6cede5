"""System prompts of the Rehearse role (the policy acting as a tool simulator) and the section headers
of its user message.

Paraphrased from the description of the reference simulator prompt (a "precise tool simulator" that
validates the call's format, name and arguments before writing a result, and answers only with an
`<execution_result>` block); no text is copied. Two styles:
- `full`: the five numbered rules spelled out, for real (instruction-following) models;
- `compact`: the same rules in two short lines, for the ~0.5 M-parameter embedded model, where every
  prompt token costs rollout time and the model learns the format from SFT rather than from prose;
- `history` (the embedded default): the compact lines, told to stay consistent with the conversation
  history that this style's user message carries (the paper's ô_t ~ π(·|h_t, a_t, Rehearse)).
Departure: the reference appends a `/think` switch to the user message; thinking is left to the chat
template's `enable_thinking` flag here instead.
"""

from __future__ import annotations

from typing import Literal

from envace.execution_result import RESULT_CLOSE, RESULT_OPEN  # noqa: F401  # defined with their parser
from envace.types import ErrorCode

Style = Literal["full", "compact", "history"]
STYLES: tuple[str, ...] = ("full", "compact", "history")

# Section headers of the Rehearse user message, in order.
SEC_TOOLS = "Candidate tools (whitelist for this sample):"
SEC_FEW_SHOT = "Previous tool calls and results (few-shot):"
SEC_HISTORY = "Current conversation history:"
SEC_LATEST = "RL model's latest response:"
SEC_CURRENT = "Current tool to simulate:"
SECTIONS: tuple[str, ...] = (SEC_TOOLS, SEC_FEW_SHOT, SEC_HISTORY, SEC_LATEST, SEC_CURRENT)
UNAVAILABLE = "<unavailable>"

_FMT = ErrorCode.INVALID_TOOL_CALL_FORMAT.value
_NAME = ErrorCode.UNKNOWN_TOOL.value
_PARAMS = ErrorCode.INVALID_PARAMETERS.value

FULL_SYSTEM_PROMPT = f"""You stand in for the real backend of a set of tools. You receive one tool call made by an \
assistant and must answer exactly as the tool would, acting as a silent executor that never chats.

Work through these steps in order and stop at the first one that fails:
1. Format. If the call is not a well-formed call (a JSON object with a "name" and an "arguments" object), \
the answer is an error with code {_FMT}.
2. Name. If the tool name is not in the candidate whitelist of this sample, the answer is an error with \
code {_NAME}.
3. Arguments. If the arguments break the tool's JSON schema (a required argument is missing, an argument \
is not declared, a value has the wrong type or is outside its allowed values), the answer is an error with \
code {_PARAMS}.
4. Result. Otherwise write the result the tool would return for these arguments, consistent with the \
conversation so far. When an earlier call in the few-shot section used the same tool with similar \
arguments, reuse its result, adapting only what the new arguments change.
5. Output. Reply with ONLY this block and nothing before or after it:
{RESULT_OPEN}
<a JSON object or a JSON array>
{RESULT_CLOSE}
Errors use the same block with the object {{"error_tool_call": {{"code": "<CODE>", "message": "<what is wrong>"}}}}."""

COMPACT_SYSTEM_PROMPT = (
    f"Simulate the tool. Errors: {_FMT}, {_NAME}, {_PARAMS} "
    'as {"error_tool_call":{"code","message"}}.\n'
    f"Else reuse the few-shot results. Reply only {RESULT_OPEN} JSON {RESULT_CLOSE}"
)

HISTORY_SYSTEM_PROMPT = (
    f"Simulate the tool. Errors: {_FMT}, {_NAME}, {_PARAMS} "
    'as {"error_tool_call":{"code","message"}}.\n'
    f"Else reuse the few-shot results, consistent with the history. Reply only {RESULT_OPEN} JSON {RESULT_CLOSE}"
)

_PROMPTS: dict[str, str] = {"full": FULL_SYSTEM_PROMPT, "history": HISTORY_SYSTEM_PROMPT,
                            "compact": COMPACT_SYSTEM_PROMPT}


def simulator_system_prompt(style: str = "full") -> str:
    """The Rehearse system prompt of the given style ("full" | "history" | "compact")."""
    try:
        return _PROMPTS[style]
    except KeyError:
        raise ValueError(f"unknown rehearse prompt style {style!r}; use one of {list(STYLES)}") from None
