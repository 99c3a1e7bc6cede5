"""SQLAlchemy 2 models of the trajectory store: runs, trajectories, turns, checklist reward items and
rehearsal-vs-real fidelity pairs.

One `TrajectoryRow` per rollout, identified by its natural key (run, step, mode, prompt_index,
sample_index, split); the writer inserts with ON CONFLICT DO NOTHING on that key, so re-writing a step
after a resume never duplicates a row. Children (turns, reward items, fidelity pairs) use composite
primary keys (trajectory_id, position): they are only ever read through their trajectory.

Enums are stored as their *values* in plain VARCHAR columns without CHECK constraints, so adding a role
or a termination reason needs no migration. Indexes are chosen for the dashboard's queries (see
query.py): one run, filtered by step / reward / mode / termination / role, sorted by step or reward,
50 rows. Turns carry no secondary index (the role filter uses the trajectory's `role_mask`), which keeps
the bulk of the inserts cheap.
In SQLite every index implicitly ends with the rowid; the explicit trailing `id` makes PostgreSQL's
indexes serve the `ORDER BY ..., id` tie-break too.
"""

from __future__ import annotations

from datetime import UTC, datetime
from enum import Enum
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from envace.types import ErrorCode, Mode, Role, TerminationReason


class TrajectoryMode(str, Enum):
    """Why a trajectory was generated."""

    TRAIN = "train"
    EVAL = "eval"
    TTS_PRIVATE = "tts-private"  # a private rehearsal before a test-time committed execution
    TTS_COMMIT = "tts-commit"  # the one committed execution in the real environment


class RunKind(str, Enum):
    TRAIN = "train"
    EVAL = "eval"
    SWEEP = "sweep"
    TTS = "tts"


class RunStatus(str, Enum):
    RUNNING = "running"
    FINISHED = "finished"
    FAILED = "failed"
    KILLED = "killed"


def utcnow() -> datetime:
    return datetime.now(UTC)


def _enum(cls: type[Enum], length: int = 32) -> sa.Enum:
    return sa.Enum(cls, native_enum=False, create_constraint=False, length=length,
                   values_callable=lambda e: [m.value for m in e], validate_strings=True)


# INTEGER PRIMARY KEY is SQLite's rowid alias (autoincrement); BIGINT elsewhere.
BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
# None is stored as SQL NULL (not the JSON literal null) so "absent" is queryable with IS NULL.
Json = sa.JSON(none_as_null=True).with_variant(JSONB(none_as_null=True), "postgresql")
Stamp = sa.DateTime(timezone=True)


class Base(DeclarativeBase):
    pass


class Run(Base):
    __tablename__ = "runs"

    id: Mapped[str] = mapped_column(sa.String(64), primary_key=True)
    name: Mapped[str] = mapped_column(sa.String(256), default="")
    kind: Mapped[RunKind] = mapped_column(_enum(RunKind), default=RunKind.TRAIN)
    status: Mapped[RunStatus] = mapped_column(_enum(RunStatus), default=RunStatus.RUNNING)
    config: Mapped[dict[str, Any] | None] = mapped_column(Json, nullable=True)
    git_commit: Mapped[str | None] = mapped_column(sa.String(64), nullable=True)
    mlflow_run_id: Mapped[str | None] = mapped_column(sa.String(64), nullable=True)
    parent_id: Mapped[str | None] = mapped_column(sa.ForeignKey("runs.id", ondelete="SET NULL"), nullable=True)
    created_at: Mapped[datetime] = mapped_column(Stamp, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(Stamp, default=utcnow, onupdate=utcnow)

    __table_args__ = (
        sa.Index("ix_runs_parent", "parent_id"),
        sa.Index("ix_runs_kind_created", "kind", "created_at"),
    )


NATURAL_KEY = ("run_id", "step", "mode", "prompt_index", "sample_index", "split")

# One bit per role in TrajectoryRow.role_mask ("has a turn of this role"): the role filter then reads
# the trajectory index instead of probing turns. Bits are stored data: never renumber; a new Role gets
# the next free bit (tests fail until it has one).
ROLE_BITS: dict[Role, int] = {Role.SYSTEM: 1, Role.USER: 2, Role.ACT: 4, Role.REHEARSE: 8, Role.ENV: 16,
                              Role.JUDGE: 32}


class TrajectoryRow(Base):
    __tablename__ = "trajectories"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(sa.ForeignKey("runs.id", ondelete="CASCADE"))
    step: Mapped[int] = mapped_column(sa.Integer)
    split: Mapped[str] = mapped_column(sa.String(64), default="train")
    prompt_id: Mapped[str] = mapped_column(sa.String(128), default="")  # the task uuid
    prompt_index: Mapped[int] = mapped_column(sa.Integer)
    sample_index: Mapped[int] = mapped_column(sa.Integer)
    mode: Mapped[TrajectoryMode] = mapped_column(_enum(TrajectoryMode, 16))
    rollout_mode: Mapped[Mode] = mapped_column(_enum(Mode, 16))
    domain: Mapped[str] = mapped_column(sa.String(128), default="")
    reward: Mapped[float | None] = mapped_column(sa.Float, nullable=True)  # None = unscored
    termination: Mapped[TerminationReason | None] = mapped_column(_enum(TerminationReason), nullable=True)
    n_turns: Mapped[int] = mapped_column(sa.Integer, default=0)  # policy generations (Trajectory.turns)
    n_tool_calls: Mapped[int] = mapped_column(sa.Integer, default=0)
    env_calls: Mapped[int] = mapped_column(sa.Integer, default=0)
    role_mask: Mapped[int] = mapped_column(sa.Integer, default=0)  # OR of ROLE_BITS of its turns
    reward_breakdown: Mapped[dict[str, Any] | None] = mapped_column(Json, nullable=True)  # minus the items
    created_at: Mapped[datetime] = mapped_column(Stamp, default=utcnow)
    # Benchmark trajectories (migration 0003, envace.store.benchmark_rows): the benchmark's name ("" for the
    # tool world and training) and the task's error message (adapter, environment or the benchmark's own
    # evaluator failed: the task scores 0 and this says why; NULL when it ran).
    benchmark: Mapped[str] = mapped_column(sa.String(32), default="", server_default="")
    error: Mapped[str | None] = mapped_column(sa.Text, nullable=True)

    __table_args__ = (
        sa.UniqueConstraint(*NATURAL_KEY, name="uq_trajectories_natural_key"),
        # Covering indexes: every one holds the common filter columns (step, mode, termination, reward,
        # role_mask) and id, so a page's ids are found on one index alone, walking it in sort order
        # (the first two: `ORDER BY step|reward, id`) or reading only the matches of a mode /
        # termination filter; the table rows are read for the 50 ids of the page only (query.py).
        sa.Index("ix_traj_run_step", "run_id", "step", "id", "mode", "termination", "reward", "role_mask"),
        sa.Index("ix_traj_run_reward", "run_id", "reward", "id", "step", "mode", "termination", "role_mask"),
        sa.Index("ix_traj_run_mode", "run_id", "mode", "step", "termination", "reward", "role_mask", "id"),
        sa.Index("ix_traj_run_termination", "run_id", "termination", "step", "mode", "reward", "role_mask", "id"),
        sa.Index("ix_traj_run_prompt", "run_id", "prompt_id"),
        sa.Index("ix_traj_benchmark_run", "benchmark", "run_id"),  # the dashboard's benchmark filter
    )


class TurnRow(Base):
    """One stored turn: a policy generation (Act / Rehearse / a frozen simulator) or the user message
    that opened a user turn (role USER; not a generation, so token fields are empty)."""

    __tablename__ = "turns"

    trajectory_id: Mapped[int] = mapped_column(sa.ForeignKey("trajectories.id", ondelete="CASCADE"),
                                               primary_key=True)
    turn_index: Mapped[int] = mapped_column(sa.Integer, primary_key=True)
    role: Mapped[Role] = mapped_column(_enum(Role, 16))
    user_turn: Mapped[int] = mapped_column(sa.Integer, default=0)
    text: Mapped[str] = mapped_column(sa.Text, default="")
    tool_calls: Mapped[list[dict[str, Any]] | None] = mapped_column(Json, nullable=True)
    parse_error: Mapped[ErrorCode | None] = mapped_column(_enum(ErrorCode, 48), nullable=True)
    call: Mapped[dict[str, Any] | None] = mapped_column(Json, nullable=True)  # Rehearse: the simulated call
    observation: Mapped[dict[str, Any] | None] = mapped_column(Json, nullable=True)
    real_observation: Mapped[dict[str, Any] | None] = mapped_column(Json, nullable=True)
    n_tokens: Mapped[int] = mapped_column(sa.Integer, default=0)
    logprob_mean: Mapped[float | None] = mapped_column(sa.Float, nullable=True)
    logprob_min: Mapped[float | None] = mapped_column(sa.Float, nullable=True)
    temperature: Mapped[float | None] = mapped_column(sa.Float, nullable=True)
    advantage: Mapped[float | None] = mapped_column(sa.Float, nullable=True)
    trainable: Mapped[bool] = mapped_column(sa.Boolean, default=True)
    # Turn.id and Turn.answers (migration 0004): the generation's id in its trajectory (NULL for USER rows)
    # and, for an answer (Rehearse), the Act turn's turn_id and the call's index in it, as the rollout paired them
    turn_id: Mapped[int | None] = mapped_column(sa.Integer, nullable=True)
    answers_turn: Mapped[int | None] = mapped_column(sa.Integer, nullable=True)
    answers_call: Mapped[int | None] = mapped_column(sa.Integer, nullable=True)


class RewardItem(Base):
    """One checklist item's verdict (CM2-style reward breakdown)."""

    __tablename__ = "reward_items"

    trajectory_id: Mapped[int] = mapped_column(sa.ForeignKey("trajectories.id", ondelete="CASCADE"),
                                               primary_key=True)
    position: Mapped[int] = mapped_column(sa.Integer, primary_key=True)
    user_turn: Mapped[int] = mapped_column(sa.Integer, default=0)
    item_id: Mapped[str] = mapped_column(sa.String(128), default="")
    weight: Mapped[float] = mapped_column(sa.Float, default=1.0)
    passed: Mapped[bool | None] = mapped_column(sa.Boolean, nullable=True)  # None = judge could not score
    question: Mapped[str] = mapped_column(sa.Text, default="")

    __table_args__ = (sa.Index("ix_reward_items_item", "item_id"),)


class FidelityPair(Base):
    """A rehearsed observation next to the real environment's answer to the same call."""

    __tablename__ = "fidelity_pairs"

    trajectory_id: Mapped[int] = mapped_column(sa.ForeignKey("trajectories.id", ondelete="CASCADE"),
                                               primary_key=True)
    turn_index: Mapped[int] = mapped_column(sa.Integer, primary_key=True)  # the Rehearse TurnRow
    tool_name: Mapped[str] = mapped_column(sa.String(128))
    call: Mapped[dict[str, Any] | None] = mapped_column(Json, nullable=True)
    rehearsed_text: Mapped[str] = mapped_column(sa.Text, default="")
    rehearsed: Mapped[Any] = mapped_column(Json, nullable=True)  # parsed JSON, None when invalid
    real: Mapped[Any] = mapped_column(Json, nullable=True)
    exact_match: Mapped[bool] = mapped_column(sa.Boolean, default=False)
    json_valid: Mapped[bool] = mapped_column(sa.Boolean, default=False)
    schema_ok: Mapped[bool] = mapped_column(sa.Boolean, default=False)
    field_f1: Mapped[float] = mapped_column(sa.Float, default=0.0)

    __table_args__ = (sa.Index("ix_fidelity_tool", "tool_name"),)
