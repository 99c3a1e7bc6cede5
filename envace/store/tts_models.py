"""Store tables of test-time rehearsal (TTS): one row per committed execution and one per private rehearsal.

- `tts_commits` (one per trajectory of mode `tts-commit`): N, the mode, the attempt, where rehearsal
  happened (`rehearse_at`), the attempt's seed, the final rehearsal memory m_x, the per-user-turn phase
  summaries (memories, reviews, seeds), and the calls the committed run executed with their REAL results
  (`real_calls`; env-mode rollouts store no observation turns, and the dashboard shows these next to the
  imagined responses of the same calls).
- `tts_rehearsals` (one per trajectory of mode `tts-private`): the link to its committed execution by the
  commit's natural key (run, step, split, prompt index, attempt = the commit's sample index; mode
  `tts-commit`), N, the mode, its index among the N rehearsals of its phase, the user turn it rehearsed,
  its self-assessment and verdict, the memory its phase wrote, its seed.
The link is a natural key rather than a foreign key to the commit's id because the private rehearsals are
written before (or with) their commit and ids are assigned at insert; `envace.store.tts_query` resolves it
through the (run_id, step, mode, prompt_index, sample_index, split) unique index.
Created by migration 0002_tts.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Mapped, mapped_column

from envace.store.models import Base, BigId, Json


class TTSCommit(Base):
    __tablename__ = "tts_commits"

    trajectory_id: Mapped[int] = mapped_column(BigId, sa.ForeignKey("trajectories.id", ondelete="CASCADE"),
                                               primary_key=True)
    n: Mapped[int] = mapped_column(sa.Integer)
    tts_mode: Mapped[str] = mapped_column(sa.String(16))
    attempt: Mapped[int] = mapped_column(sa.Integer)
    rehearse_at: Mapped[str] = mapped_column(sa.String(16))
    seed: Mapped[int | None] = mapped_column(sa.BigInteger, nullable=True)
    memory: Mapped[str] = mapped_column(sa.Text)
    phases: Mapped[list[dict[str, Any]] | None] = mapped_column(Json, nullable=True)
    real_calls: Mapped[list[dict[str, Any]] | None] = mapped_column(Json, nullable=True)


class TTSRehearsal(Base):
    __tablename__ = "tts_rehearsals"

    trajectory_id: Mapped[int] = mapped_column(BigId, sa.ForeignKey("trajectories.id", ondelete="CASCADE"),
                                               primary_key=True)
    run_id: Mapped[str] = mapped_column(sa.String(64))
    step: Mapped[int] = mapped_column(sa.Integer)
    split: Mapped[str] = mapped_column(sa.String(64))
    prompt_index: Mapped[int] = mapped_column(sa.Integer)
    attempt: Mapped[int] = mapped_column(sa.Integer)
    n: Mapped[int] = mapped_column(sa.Integer)
    tts_mode: Mapped[str] = mapped_column(sa.String(16))
    rehearsal_index: Mapped[int] = mapped_column(sa.Integer)
    user_turn: Mapped[int] = mapped_column(sa.Integer)
    assessment: Mapped[str] = mapped_column(sa.Text)
    achieved: Mapped[bool | None] = mapped_column(sa.Boolean, nullable=True)
    memory: Mapped[str] = mapped_column(sa.Text)
    seed: Mapped[int | None] = mapped_column(sa.BigInteger, nullable=True)

    __table_args__ = (sa.Index("ix_tts_rehearsals_commit", "run_id", "step", "split", "prompt_index", "attempt"),)


# Column order of the rows tts_rows() builds (after trajectory_id, which ingest.py prepends).
COMMIT_COLUMNS = tuple(c.name for c in TTSCommit.__table__.columns if c.name != "trajectory_id")
REHEARSAL_COLUMNS = tuple(c.name for c in TTSRehearsal.__table__.columns if c.name != "trajectory_id")
