"""Test-time rehearsal: tts_commits and tts_rehearsals (see envace/store/tts_models.py).

Revision ID: 0002_tts
Revises: 0001
Create Date: 2026-12-01
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0002_tts"
down_revision = "0001"
branch_labels = None
depends_on = None


def _json() -> sa.types.TypeEngine:
    return sa.JSON(none_as_null=True).with_variant(postgresql.JSONB(none_as_null=True), "postgresql")


def _id() -> sa.types.TypeEngine:
    return sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def _parent_fk() -> sa.ForeignKeyConstraint:
    return sa.ForeignKeyConstraint(["trajectory_id"], ["trajectories.id"], ondelete="CASCADE")


def upgrade() -> None:
    op.create_table(
        "tts_commits",
        sa.Column("trajectory_id", _id(), nullable=False),
        sa.Column("n", sa.Integer(), nullable=False),
        sa.Column("tts_mode", sa.String(16), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("rehearse_at", sa.String(16), nullable=False),
        sa.Column("seed", sa.BigInteger(), nullable=True),
        sa.Column("memory", sa.Text(), nullable=False),
        sa.Column("phases", _json(), nullable=True),
        sa.Column("real_calls", _json(), nullable=True),
        _parent_fk(),
        sa.PrimaryKeyConstraint("trajectory_id"),
    )
    op.create_table(
        "tts_rehearsals",
        sa.Column("trajectory_id", _id(), nullable=False),
        sa.Column("run_id", sa.String(64), nullable=False),
        sa.Column("step", sa.Integer(), nullable=False),
        sa.Column("split", sa.String(64), nullable=False),
        sa.Column("prompt_index", sa.Integer(), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("n", sa.Integer(), nullable=False),
        sa.Column("tts_mode", sa.String(16), nullable=False),
        sa.Column("rehearsal_index", sa.Integer(), nullable=False),
        sa.Column("user_turn", sa.Integer(), nullable=False),
        sa.Column("assessment", sa.Text(), nullable=False),
        sa.Column("achieved", sa.Boolean(), nullable=True),
        sa.Column("memory", sa.Text(), nullable=False),
        sa.Column("seed", sa.BigInteger(), nullable=True),
        _parent_fk(),
        sa.PrimaryKeyConstraint("trajectory_id"),
    )
    op.create_index("ix_tts_rehearsals_commit", "tts_rehearsals",
                    ["run_id", "step", "split", "prompt_index", "attempt"])


def downgrade() -> None:
    op.drop_index("ix_tts_rehearsals_commit", table_name="tts_rehearsals")
    op.drop_table("tts_rehearsals")
    op.drop_table("tts_commits")
