"""Alembic migrations: upgrade on an empty database, downgrade to base and back, no drift from the models."""

from __future__ import annotations

import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory

from envace.store import tts_models  # noqa: F401  (registers the TTS tables on Base.metadata)
from envace.store.models import Base
from envace.store.session import (
    MIGRATIONS_DIR,
    current_revision,
    downgrade,
    make_engine,
    upgrade,
)

TABLES = {"runs", "trajectories", "turns", "reward_items", "fidelity_pairs", "tts_commits", "tts_rehearsals"}


def tables(url: str) -> set[str]:
    engine = make_engine(url)
    try:
        return set(sa.inspect(engine).get_table_names()) - {"alembic_version"}
    finally:
        engine.dispose()


def head() -> str:
    return ScriptDirectory(str(MIGRATIONS_DIR)).get_current_head()


def test_upgrade_downgrade_upgrade(store_url):
    assert tables(store_url) == set() and current_revision(store_url) is None
    upgrade(store_url)
    assert tables(store_url) == TABLES and current_revision(store_url) == head()
    upgrade(store_url)  # idempotent
    downgrade(store_url, "base")
    assert tables(store_url) == set() and current_revision(store_url) is None
    upgrade(store_url, "head")
    assert tables(store_url) == TABLES and current_revision(store_url) == head()


def test_migrated_schema_matches_the_models(store_url):
    upgrade(store_url)
    engine = make_engine(store_url)
    with engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn, opts={"compare_type": True}), Base.metadata)
        indexes = {ix["name"] for ix in sa.inspect(conn).get_indexes("trajectories")}
    engine.dispose()
    assert diff == []
    assert {"ix_traj_run_step", "ix_traj_run_reward", "ix_traj_run_mode", "ix_traj_run_termination"} <= indexes


def test_sqlite_pragmas_and_packaged_migrations(tmp_path):
    assert (MIGRATIONS_DIR / "env.py").is_file() and (MIGRATIONS_DIR.parent / "alembic.ini").is_file()
    engine = make_engine(tmp_path / "sub" / "s.db")  # parent directories are created
    with engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
        assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() == 60000
    engine.dispose()


def test_every_role_has_a_role_mask_bit():
    from envace.store.models import ROLE_BITS
    from envace.types import Role

    missing = [r for r in Role if r not in ROLE_BITS]
    assert not missing, f"add bits for {missing} to ROLE_BITS (next free: {2 * max(ROLE_BITS.values())})"
    assert len(set(ROLE_BITS.values())) == len(ROLE_BITS) and all(b & (b - 1) == 0 for b in ROLE_BITS.values())
