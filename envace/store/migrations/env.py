"""Alembic environment of the trajectory store.

The whole upgrade runs in ONE transaction that we open ourselves (Alembic then opens none of its own):
on SQLite that transaction is BEGIN IMMEDIATE (see session.py) and on PostgreSQL it first takes an
advisory lock, so processes that upgrade the same database at once run one after the other and the later
ones find the schema at head. SQLite's foreign keys are switched off for the migration connection because
batch-mode table rebuilds drop and recreate tables, which would cascade-delete child rows.
"""

from __future__ import annotations

from logging.config import fileConfig

import sqlalchemy as sa
from alembic import context

from envace.store import tts_models  # noqa: F401  (registers the TTS tables on Base.metadata)
from envace.store.models import Base
from envace.store.session import make_engine

config = context.config
_LOCK_KEY = 0x656E766163650001  # "envace" + 1: serialises concurrent upgrades on PostgreSQL

engine = config.attributes.get("engine")
owned = engine is None
if owned:  # the alembic CLI: -x url=... or sqlalchemy.url
    if config.config_file_name is not None:
        fileConfig(config.config_file_name, disable_existing_loggers=False)
    url = context.get_x_argument(as_dictionary=True).get("url") or config.get_main_option("sqlalchemy.url")
    if not url:
        raise SystemExit("no database: pass -x url=sqlite:///path/store.db (or any SQLAlchemy URL)")
    engine = make_engine(url)

if context.is_offline_mode():
    context.configure(url=engine.url, target_metadata=Base.metadata, literal_binds=True, render_as_batch=True)
    with context.begin_transaction():
        context.run_migrations()
else:
    with engine.connect() as conn:
        sqlite = conn.dialect.name == "sqlite"
        if sqlite:
            conn.connection.dbapi_connection.execute("PRAGMA foreign_keys = OFF")
        try:
            with conn.begin():
                if conn.dialect.name == "postgresql":
                    conn.execute(sa.text("SELECT pg_advisory_xact_lock(:k)"), {"k": _LOCK_KEY})
                context.configure(connection=conn, target_metadata=Base.metadata, render_as_batch=sqlite,
                                  compare_type=True)
                context.run_migrations()
        finally:
            if sqlite:
                conn.connection.dbapi_connection.execute("PRAGMA foreign_keys = ON")
    if owned:
        engine.dispose()
