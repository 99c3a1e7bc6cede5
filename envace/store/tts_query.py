"""Reading test-time rehearsal (TTS) from the store: a committed execution with its N private rehearsals.

- `tts_commit(session, trajectory_id)`: the TTS record of a committed execution (N, mode, attempt, m_x,
  phases, the real results of its calls), or None when the trajectory is not one;
- `tts_rehearsals(session, commit_id)`: its private rehearsals (one `TTSRehearsalRecord` each: the private
  trajectory's id, index, user turn, self-assessment, verdict, memory, seed, termination), ordered by
  (user turn, index), found through the commit's natural key (run, step, split, prompt index, attempt);
- `commit_of(session, private_id)`: the committed execution a private rehearsal belongs to;
- `list_tts_commits(session, run_id)`: a run's committed executions with their N and private-rehearsal counts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from envace.store.models import TrajectoryMode, TrajectoryRow
from envace.store.tts_models import TTSCommit, TTSRehearsal
from envace.types import TerminationReason

T, C, R = TrajectoryRow, TTSCommit, TTSRehearsal


@dataclass
class TTSCommitRecord:
    trajectory_id: int
    run_id: str
    step: int
    split: str
    prompt_id: str
    prompt_index: int
    attempt: int
    n: int
    tts_mode: str
    rehearse_at: str
    seed: int | None
    memory: str
    phases: list[dict[str, Any]]
    real_calls: list[dict[str, Any]]
    reward: float | None
    termination: TerminationReason | None


@dataclass
class TTSRehearsalRecord:
    trajectory_id: int
    rehearsal_index: int
    user_turn: int
    assessment: str
    achieved: bool | None
    memory: str
    seed: int | None
    termination: TerminationReason | None
    n_turns: int


def tts_commit(session: Session, trajectory_id: int) -> TTSCommitRecord | None:
    q = (sa.select(C.trajectory_id, T.run_id, T.step, T.split, T.prompt_id, T.prompt_index, C.attempt, C.n, C.tts_mode,
                   C.rehearse_at, C.seed, C.memory, C.phases, C.real_calls, T.reward, T.termination)
         .join(T, T.id == C.trajectory_id).where(C.trajectory_id == trajectory_id))
    row = session.execute(q).first()
    if row is None:
        return None
    m = dict(row._mapping)
    m["phases"], m["real_calls"] = m["phases"] or [], m["real_calls"] or []
    return TTSCommitRecord(**m)


def tts_rehearsals(session: Session, commit_id: int) -> list[TTSRehearsalRecord]:
    commit = session.execute(sa.select(T.run_id, T.step, T.split, T.prompt_index, T.sample_index)
                             .where(T.id == commit_id, T.mode == TrajectoryMode.TTS_COMMIT)).first()
    if commit is None:
        return []
    q = (sa.select(R.trajectory_id, R.rehearsal_index, R.user_turn, R.assessment, R.achieved, R.memory, R.seed,
                   T.termination, T.n_turns)
         .join(T, T.id == R.trajectory_id)
         .where(R.run_id == commit.run_id, R.step == commit.step, R.split == commit.split,
                R.prompt_index == commit.prompt_index, R.attempt == commit.sample_index)
         .order_by(R.user_turn, R.rehearsal_index, R.trajectory_id))
    return [TTSRehearsalRecord(**dict(r._mapping)) for r in session.execute(q)]


def commit_of(session: Session, private_id: int) -> int | None:
    link = session.execute(sa.select(R.run_id, R.step, R.split, R.prompt_index, R.attempt)
                           .where(R.trajectory_id == private_id)).first()
    if link is None:
        return None
    return session.execute(sa.select(T.id).where(
        T.run_id == link.run_id, T.step == link.step, T.mode == TrajectoryMode.TTS_COMMIT,
        T.prompt_index == link.prompt_index, T.sample_index == link.attempt, T.split == link.split)).scalar()


def list_tts_commits(session: Session, run_id: str, limit: int = 200) -> list[dict[str, Any]]:
    """[{trajectory_id, step, split, prompt_id, attempt, n, tts_mode, reward, n_private}] of a run."""
    n_private = (sa.select(sa.func.count()).select_from(R)
                 .where(R.run_id == T.run_id, R.step == T.step, R.split == T.split,
                        R.prompt_index == T.prompt_index, R.attempt == T.sample_index)
                 .correlate(T).scalar_subquery())
    q = (sa.select(C.trajectory_id, T.step, T.split, T.prompt_id, C.attempt, C.n, C.tts_mode, T.reward,
                   n_private.label("n_private"))
         .join(T, T.id == C.trajectory_id).where(T.run_id == run_id).order_by(T.step, T.prompt_index, C.attempt)
         .limit(limit))
    return [dict(r._mapping) for r in session.execute(q)]
