"""Diagnostic toy rewards (`reward=toy`): targets simple enough that a briefly SFT'd tiny model hits them
sometimes, so a working RL loop must make them more frequent within a few dozen steps (and less frequent
with `flip_advantage_sign`). They prove the loop can climb a reward at all; they say nothing about the
task. Not in the paper.

Kinds:
  first_call_tool  1.0 when the first tool call of the episode (first Act output that attempts one) names
                   `target`, else 0.0 (an episode without any call scores 0.0). A malformed call counts by
                   the name it wrote (`"name": "..."`): a briefly SFT'd tiny model writes tool names long
                   before it writes valid calls, and the diagnostic needs a reward it earns sometimes.
  reply_word       1.0 when some final reply of the episode contains `target` as a whole word (any case)
"""

from __future__ import annotations

import re
from enum import Enum

from envace.conversation import contains_phrase, split_turns
from envace.types import ErrorCode, Role, Trajectory

_NAME = re.compile(r'"name"\s*:\s*"([^"]*)"')


class ToyKind(str, Enum):
    FIRST_CALL_TOOL = "first_call_tool"
    REPLY_WORD = "reply_word"


def first_call_name(traj: Trajectory) -> str | None:
    """The tool name of the episode's first attempted call (parsed, or written in a malformed call)."""
    for turn in traj.turns_of(Role.ACT):
        if turn.tool_calls:
            return turn.tool_calls[0].name
        if turn.parse_error not in (None, ErrorCode.NO_TOOL_CALL):
            found = _NAME.search(turn.text)
            return found.group(1) if found else ""
    return None


def toy_reward(traj: Trajectory, kind: ToyKind | str, target: str) -> float:
    kind = ToyKind(kind)
    if kind is ToyKind.FIRST_CALL_TOOL:
        return float(first_call_name(traj) == target)
    return float(any(contains_phrase(t.final_reply, target) for t in split_turns(traj.messages)))
