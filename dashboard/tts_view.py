"""Test-time rehearsal on the trajectory page, as data (no Streamlit; tested on hand-built records): for a
committed execution, each call it really executed next to the responses its private rehearsals imagined
for the same call (same tool name and arguments) before it, and a row per private rehearsal.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from envace.store.records import TrajectoryRecord
from envace.store.tts_query import TTSCommitRecord, TTSRehearsalRecord
from envace.types import Role
from envace_dashboard.timeline import observation_value


def call_key(name: Any, arguments: Any) -> str:
    return f"{name}({json.dumps(arguments, sort_keys=True, ensure_ascii=False, default=str)})"


@dataclass
class Imagined:
    rehearsal_index: int
    user_turn: int
    trajectory_id: int
    value: Any  # the imagined response as the agent saw it (JSON value, or the error object)


@dataclass
class CallComparison:
    user_turn: int
    name: str
    arguments: Any
    real: Any
    imagined: list[Imagined] = field(default_factory=list)


def comparisons(commit: TTSCommitRecord, privates: list[tuple[TTSRehearsalRecord, TrajectoryRecord]]
                ) -> list[CallComparison]:
    """One row per call the committed run executed; `imagined` holds the rehearsals' responses to the same
    call made at or before that user turn (a rehearsal cannot inform an earlier step)."""
    seen: dict[str, list[Imagined]] = {}
    for link, rec in privates:
        for t in rec.turns:
            if t.role is Role.REHEARSE and t.call is not None:
                seen.setdefault(call_key(t.call.name, t.call.arguments), []).append(
                    Imagined(link.rehearsal_index, link.user_turn, link.trajectory_id,
                             observation_value(t.observation)))
    out = []
    for c in commit.real_calls:
        turn = int(c.get("user_turn", 0))
        same = [i for i in seen.get(call_key(c.get("name"), c.get("arguments")), []) if i.user_turn <= turn]
        out.append(CallComparison(turn, str(c.get("name")), c.get("arguments"), c.get("real"), same))
    return out


def rehearsal_rows(privates: list[TTSRehearsalRecord]) -> list[dict[str, Any]]:
    return [{"trajectory": p.trajectory_id, "rehearsal": p.rehearsal_index + 1, "user turn": p.user_turn,
             "termination": p.termination.value if p.termination else None, "generations": p.n_turns,
             "achieved": p.achieved, "self-assessment": p.assessment} for p in privates]
