"""A stored trajectory as a timeline for display: user messages, and per Act output one row per tool call
holding the call, the Rehearse output that answered it and the real environment's answer (when the
rollout recorded one), with a line diff of rehearsed vs real.

Pure functions over `envace.store.records` (no Streamlit), so they are tested on hand-built records.
An answer turn (Rehearse, frozen simulator, environment) sits in the row of the call its stored link
names (`TurnRecord.answers`: the Act turn's id and the call index, recorded by the rollout). An answer
without a link (stored before the links existed) or whose link names no stored call gets a row of its own
under the Act output before it, rather than a guessed pairing.
"""

from __future__ import annotations

import difflib
import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from envace.store.records import FidelityRecord, TrajectoryRecord, TurnRecord
from envace.types import Observation, Role, ToolCall

ANSWER_ROLES = (Role.REHEARSE, Role.ENV)


def pretty(value: Any) -> str:
    """Indented, key-sorted JSON (non-ASCII kept); values that are not JSON fall back to repr."""
    try:
        return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)
    except (TypeError, ValueError):
        return repr(value)


def pretty_call(call: ToolCall | None) -> str:
    if call is None:
        return ""
    return pretty({"name": call.name, "arguments": call.arguments})


def observation_value(obs: Observation | None) -> Any:
    """What the agent saw for a stored observation (`Observation.agent_value`), None without one."""
    return None if obs is None else obs.agent_value()


def line_diff(rehearsed: str, real: str) -> str:
    """Unified diff (rehearsed → real); empty when the texts are equal."""
    lines = difflib.unified_diff(rehearsed.splitlines(), real.splitlines(), fromfile="rehearsed",
                                 tofile="real", lineterm="", n=3)
    return "\n".join(lines)


@dataclass
class CallRow:
    call: ToolCall | None
    answer: TurnRecord | None = None  # the Rehearse (or frozen simulator) turn that answered it
    fidelity: FidelityRecord | None = None

    @property
    def has_real(self) -> bool:
        return self.answer is not None and self.answer.real_observation is not None

    @property
    def real_value(self) -> Any:
        if self.fidelity is not None:
            return self.fidelity.real
        return observation_value(self.answer.real_observation) if self.answer is not None else None

    @property
    def rehearsed_text(self) -> str:
        """The rehearsed result as compared with the real one: pretty JSON when it parsed, else raw."""
        if self.answer is None:
            return ""
        if self.fidelity is not None and self.fidelity.json_valid:
            return pretty(self.fidelity.rehearsed)
        obs = self.answer.observation
        if obs is not None and obs.content is not None:
            return pretty(obs.content)
        return self.answer.text

    @property
    def diff(self) -> str | None:
        """None when no real answer exists; "" when rehearsed and real agree line for line."""
        if not self.has_real:
            return None
        return line_diff(self.rehearsed_text, pretty(self.real_value))


@dataclass
class UserBlock:
    turn: TurnRecord


@dataclass
class ActBlock:
    act: TurnRecord | None  # None: answers whose Act output is not stored
    rows: list[CallRow] = field(default_factory=list)

    @property
    def is_final_reply(self) -> bool:
        return self.act is not None and not self.act.tool_calls and self.act.parse_error is None


@dataclass
class OtherBlock:
    turn: TurnRecord  # a role the timeline has no column for (system, judge)


Block = UserBlock | ActBlock | OtherBlock


def timeline(rec: TrajectoryRecord) -> list[Block]:
    fid = {p.turn_index: p for p in rec.fidelity_pairs}
    rows: dict[tuple[int, int], CallRow] = {}  # (Act turn id, call index) -> its row
    blocks: list[Block] = []
    current: ActBlock | None = None
    for t in rec.turns:
        if t.role is Role.USER:
            blocks.append(UserBlock(t))
            current = None
        elif t.role is Role.ACT:
            current = ActBlock(t, [CallRow(c) for c in t.tool_calls])
            blocks.append(current)
            if t.id is not None:
                rows.update({(t.id, j): r for j, r in enumerate(current.rows)})
        elif t.role in ANSWER_ROLES:
            link = t.answers
            row = rows.get((link.act_turn, link.call_index)) if link is not None else None
            if row is None or row.answer is not None:  # unlinked (or a second answer): a row of its own
                if current is None:
                    current = ActBlock(None)
                    blocks.append(current)
                row = CallRow(t.call)
                current.rows.append(row)
            row.answer, row.fidelity = t, fid.get(t.turn_index)
            if row.call is None:
                row.call = t.call
        else:
            blocks.append(OtherBlock(t))
    return blocks


def tokens_by_role(rec: TrajectoryRecord) -> dict[str, int]:
    c: Counter = Counter()
    for t in rec.turns:
        c[t.role.value] += t.n_tokens
    return dict(sorted(c.items()))


def turn_rows(rec: TrajectoryRecord, preview: int = 100) -> list[dict[str, Any]]:
    """One row per stored turn: role, advantage, tokens, log-prob stats (a table for the page)."""
    return [{"turn": t.turn_index, "role": t.role.value, "user turn": t.user_turn, "tokens": t.n_tokens,
             "advantage": t.advantage, "logprob mean": t.logprob_mean, "logprob min": t.logprob_min,
             "temperature": t.temperature, "trainable": t.trainable,
             "parse error": t.parse_error.value if t.parse_error else None,
             "text": t.text if len(t.text) <= preview else t.text[:preview] + "…"} for t in rec.turns]


def checklist_rows(rec: TrajectoryRecord) -> list[dict[str, Any]]:
    return [{"user turn": i.user_turn, "item": i.item_id, "weight": i.weight,
             "passed": None if i.passed is None else bool(i.passed), "question": i.question}
            for i in rec.reward_items]
