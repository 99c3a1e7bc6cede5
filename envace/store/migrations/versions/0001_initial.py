"""Initial schema: runs, trajectories, turns, reward_items, fidelity_pairs.

Revision ID: 0001
Revises:
Create Date: 2026-11-30

Enum columns are plain VARCHARs holding the enum values (no CHECK constraint), so a new role or
termination reason needs no migration.
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0001"
down_revision = None
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
        "runs",
        sa.Column("id", sa.String(64), nullable=False),
        sa.Column("name", sa.String(256), nullable=False),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("status", sa.String(32), nullable=False),
        sa.Column("config", _json(), nullable=True),
        sa.Column("git_commit", sa.String(64), nullable=True),
        sa.Column("mlflow_run_id", sa.String(64), nullable=True),
        sa.Column("parent_id", sa.String(64), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["parent_id"], ["runs.id"], ondelete="SET NULL"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_runs_kind_created", "runs", ["kind", "created_at"])
    op.create_index("ix_runs_parent", "runs", ["parent_id"])

    op.create_table(
        "trajectories",
        sa.Column("id", _id(), autoincrement=True, nullable=False),
        sa.Column("run_id", sa.String(64), nullable=False),
        sa.Column("step", sa.Integer(), nullable=False),
        sa.Column("split", sa.String(64), nullable=False),
        sa.Column("prompt_id", sa.String(128), nullable=False),
        sa.Column("prompt_index", sa.Integer(), nullable=False),
        sa.Column("sample_index", sa.Integer(), nullable=False),
        sa.Column("mode", sa.String(16), nullable=False),
        sa.Column("rollout_mode", sa.String(16), nullable=False),
        sa.Column("domain", sa.String(128), nullable=False),
        sa.Column("reward", sa.Float(), nullable=True),
        sa.Column("termination", sa.String(32), nullable=True),
        sa.Column("n_turns", sa.Integer(), nullable=False),
        sa.Column("n_tool_calls", sa.Integer(), nullable=False),
        sa.Column("env_calls", sa.Integer(), nullable=False),
        sa.Column("role_mask", sa.Integer(), nullable=False),
        sa.Column("reward_breakdown", _json(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("run_id", "step", "mode", "prompt_index", "sample_index", "split",
                            name="uq_trajectories_natural_key"),
    )
    op.create_index("ix_traj_run_step", "trajectories",
                    ["run_id", "step", "id", "mode", "termination", "reward", "role_mask"])
    op.create_index("ix_traj_run_reward", "trajectories",
                    ["run_id", "reward", "id", "step", "mode", "termination", "role_mask"])
    op.create_index("ix_traj_run_mode", "trajectories",
                    ["run_id", "mode", "step", "termination", "reward", "role_mask", "id"])
    op.create_index("ix_traj_run_termination", "trajectories",
                    ["run_id", "termination", "step", "mode", "reward", "role_mask", "id"])
    op.create_index("ix_traj_run_prompt", "trajectories", ["run_id", "prompt_id"])

    op.create_table(
        "turns",
        sa.Column("trajectory_id", _id(), nullable=False),
        sa.Column("turn_index", sa.Integer(), nullable=False),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("user_turn", sa.Integer(), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("tool_calls", _json(), nullable=True),
        sa.Column("parse_error", sa.String(48), nullable=True),
        sa.Column("call", _json(), nullable=True),
        sa.Column("observation", _json(), nullable=True),
        sa.Column("real_observation", _json(), nullable=True),
        sa.Column("n_tokens", sa.Integer(), nullable=False),
        sa.Column("logprob_mean", sa.Float(), nullable=True),
        sa.Column("logprob_min", sa.Float(), nullable=True),
        sa.Column("temperature", sa.Float(), nullable=True),
        sa.Column("advantage", sa.Float(), nullable=True),
        sa.Column("trainable", sa.Boolean(), nullable=False),
        _parent_fk(),
        sa.PrimaryKeyConstraint("trajectory_id", "turn_index"),
    )

    op.create_table(
        "reward_items",
        sa.Column("trajectory_id", _id(), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("user_turn", sa.Integer(), nullable=False),
        sa.Column("item_id", sa.String(128), nullable=False),
        sa.Column("weight", sa.Float(), nullable=False),
        sa.Column("passed", sa.Boolean(), nullable=True),
        sa.Column("question", sa.Text(), nullable=False),
        _parent_fk(),
        sa.PrimaryKeyConstraint("trajectory_id", "position"),
    )
    op.create_index("ix_reward_items_item", "reward_items", ["item_id"])

    op.create_table(
        "fidelity_pairs",
        sa.Column("trajectory_id", _id(), nullable=False),
        sa.Column("turn_index", sa.Integer(), nullable=False),
        sa.Column("tool_name", sa.String(128), nullable=False),
        sa.Column("call", _json(), nullable=True),
        sa.Column("rehearsed_text", sa.Text(), nullable=False),
        sa.Column("rehearsed", _json(), nullable=True),
        sa.Column("real", _json(), nullable=True),
        sa.Column("exact_match", sa.Boolean(), nullable=False),
        sa.Column("json_valid", sa.Boolean(), nullable=False),
        sa.Column("schema_ok", sa.Boolean(), nullable=False),
        sa.Column("field_f1", sa.Float(), nullable=False),
        _parent_fk(),
        sa.PrimaryKeyConstraint("trajectory_id", "turn_index"),
    )
    op.create_index("ix_fidelity_tool", "fidelity_pairs", ["tool_name"])


def downgrade() -> None:
    for table in ("fidelity_pairs", "reward_items", "turns", "trajectories", "runs"):
        op.drop_table(table)  # drops its indexes too
