"""Turn ids and Act-call links: turns.turn_id, turns.answers_turn, turns.answers_call (envace.types.Turn.id /
Turn.answers, written by envace/store/rows.py).

Revision ID: 0004_turn_links
Revises: 0003_benchmarks
Create Date: 2026-12-01

Nullable columns added in place (no table rewrite). Rows stored before this revision read NULL: the
dashboard shows their answers unpaired rather than guessing the pairing from the order.
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004_turn_links"
down_revision = "0003_benchmarks"
branch_labels = None
depends_on = None

COLUMNS = ("turn_id", "answers_turn", "answers_call")


def upgrade() -> None:
    for name in COLUMNS:
        op.add_column("turns", sa.Column(name, sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("turns") as batch:  # SQLite: a table copy where DROP COLUMN cannot
        for name in reversed(COLUMNS):
            batch.drop_column(name)
