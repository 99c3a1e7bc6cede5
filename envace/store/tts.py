"""Writing test-time rehearsal (TTS) to the store: rows of `tts_commits` / `tts_rehearsals` from the records
`envace.tts.rollout` leaves on trajectories (`Trajectory.tts`), and `put_tts` to write a batch of committed
executions with their private rehearsals through a `TrajectoryWriter`.

`tts_rows` is called by rows.to_bundle for every trajectory that carries a TTS record, so the rows commit
in the same transaction as their trajectory. A committed execution's real tool results come from its
messages (an env-mode rollout records no observation turns): each assistant call is paired with the tool
message that followed it, in order.
"""

from __future__ import annotations

import json
from typing import Any

from envace.store.models import TrajectoryMode
from envace.types import Trajectory


def real_calls(traj: Trajectory) -> list[dict[str, Any]]:
    """[{"user_turn", "name", "arguments", "real"}] for every call the trajectory's messages answered."""
    out: list[dict[str, Any]] = []
    pending: list[dict[str, Any]] = []
    user_turn = -1
    for m in traj.messages:
        if m.role == "user":
            user_turn += 1
        elif m.role == "assistant" and m.tool_calls:
            pending = [{"user_turn": max(user_turn, 0), "name": c.name, "arguments": c.arguments} for c in m.tool_calls]
        elif m.role == "tool" and pending:
            call = pending.pop(0)
            try:
                call["real"] = json.loads(m.content)
            except (TypeError, ValueError):
                call["real"] = m.content
            out.append(call)
    return out


def tts_rows(traj: Trajectory, row: dict[str, Any], json_text: Any) -> tuple[list[tuple], list[tuple]]:
    """(tts_commits rows, tts_rehearsals rows) of one trajectory in storage form (tts_models column order);
    `row` is its trajectory row (rows.to_bundle), `json_text` rows.py's JSON encoder."""
    info = traj.tts or {}
    mode = row["mode"]
    if not info:
        return [], []
    if mode == TrajectoryMode.TTS_COMMIT.value:
        return [(int(info.get("n", 0)), str(info.get("mode", "")), int(info.get("attempt", 0)),
                 str(info.get("rehearse_at", "first")), info.get("seed"), str(info.get("memory", "")),
                 json_text(info.get("phases") or []), json_text(real_calls(traj)))], []
    if mode == TrajectoryMode.TTS_PRIVATE.value and info.get("role") == "private":
        achieved = info.get("achieved")
        return [], [(row["run_id"], row["step"], row["split"], row["prompt_index"], int(info.get("attempt", 0)),
                     int(info.get("n", 0)), str(info.get("mode", "")), int(info.get("index", 0)),
                     int(info.get("user_turn", 0)), str(info.get("assessment", "")),
                     None if achieved is None else bool(achieved), str(info.get("memory", "")), info.get("seed"))]
    return [], []


def put_tts(writer: Any, commits: list[Trajectory], step: int, split: str) -> int:
    """Write committed executions (mode tts-commit) and their private rehearsals (mode tts-private); the
    same (step, split) links them. Returns how many trajectories were queued."""
    private = [p for c in commits for p in (c.tts or {}).get("private", [])]
    n = writer.put(private, step=step, mode=TrajectoryMode.TTS_PRIVATE, split=split) if private else 0
    return n + writer.put(commits, step=step, mode=TrajectoryMode.TTS_COMMIT, split=split)
