"""Benchmark trajectories: trajectories.benchmark and trajectories.error (see envace/store/benchmark_rows.py).

Revision ID: 0003_benchmarks
Revises: 0002_tts
Create Date: 2026-12-01

Both columns are added in place (SQLite's ADD COLUMN with a constant default rewrites nothing), so
upgrading a store that already holds millions of training trajectories is instant; every existing row
reads benchmark '' (the tool world / training) and error NULL.
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003_benchmarks"
down_revision = "0002_tts"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("trajectories", sa.Column("benchmark", sa.String(32), nullable=False, server_default=""))
    op.add_column("trajectories", sa.Column("error", sa.Text(), nullable=True))
    op.create_index("ix_traj_benchmark_run", "trajectories", ["benchmark", "run_id"])


def downgrade() -> None:
    op.drop_index("ix_traj_benchmark_run", table_name="trajectories")
    with op.batch_alter_table("trajectories") as batch:  # SQLite: a table copy when DROP COLUMN cannot
        batch.drop_column("error")
        batch.drop_column("benchmark")
