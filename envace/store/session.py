"""Engines, sessions and migrations for the trajectory store.

`make_engine` takes a file path (→ SQLite) or any SQLAlchemy URL. SQLite connections get WAL journaling
(readers never block the writer), a 60 s busy timeout, foreign keys, a 32 MiB page cache,
`synchronous=NORMAL` (safe in WAL mode against a process crash; only an OS crash can lose the last
commits) and `BEGIN IMMEDIATE`
transactions: a writer takes the write lock when its transaction starts, so concurrent writers queue on
the busy timeout instead of failing on a lock upgrade. `postgresql://` URLs are routed to psycopg 3 (the
postgres extra; without it `make_engine` stops with a line that names the extra).

`upgrade` / `downgrade` run the Alembic migrations packaged in `envace/store/migrations` (found next to
this file; `alembic.ini` is packaged too for the `alembic` CLI). The engine travels to Alembic's env.py
in `config.attributes`, so passwords with `%` in URLs need no escaping.

`check_revision` compares the store's schema revision with the code's: a store written by a newer envace
(a revision these migrations do not know) or an older store opened read-only is one `StoreSchemaError`
line with both revisions and the fix, instead of Alembic's "Can't locate revision" or a SQL traceback.

`read_only_session` is for the dashboard: SQLite opens the file with `mode=ro`; PostgreSQL sets
`default_transaction_read_only`, so a bug in a page can never write.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import quote

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import URL, Engine, make_url
from sqlalchemy.orm import Session

STORE_DIR = Path(__file__).resolve().parent
ALEMBIC_INI = STORE_DIR / "alembic.ini"
MIGRATIONS_DIR = STORE_DIR / "migrations"


def to_url(url_or_path: str | Path | URL) -> URL:
    """A SQLAlchemy URL for a path or URL string. A path becomes an absolute `sqlite:///` URL."""
    if isinstance(url_or_path, URL):
        url = url_or_path
    elif isinstance(url_or_path, Path) or "://" not in str(url_or_path):
        text = str(url_or_path)
        if not text.strip():
            raise ValueError("store location is empty; pass a file path (store.db) or a SQLAlchemy URL")
        return make_url(f"sqlite:///{Path(text).expanduser().resolve()}")
    else:
        url = make_url(str(url_or_path))
    if url.drivername in ("postgresql", "postgres"):
        url = url.set(drivername="postgresql+psycopg")
    return url


def _sqlite_setup(engine: Engine, read_only: bool) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn, _record):  # noqa: ANN001
        dbapi_conn.isolation_level = None  # we issue BEGIN ourselves (pysqlite's own is deferred)
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA busy_timeout = 60000")
        cur.execute("PRAGMA foreign_keys = ON")
        cur.execute("PRAGMA cache_size = -32768")  # 32 MiB: index pages of million-row runs stay cached
        if not read_only:
            cur.execute("PRAGMA journal_mode = WAL")
            cur.execute("PRAGMA synchronous = NORMAL")
        cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn):  # noqa: ANN001
        conn.exec_driver_sql("BEGIN" if read_only else "BEGIN IMMEDIATE")


def make_engine(url_or_path: str | Path | URL, *, read_only: bool = False, echo: bool = False) -> Engine:
    """An engine for the store at `url_or_path` (file path → SQLite in WAL mode)."""
    url = to_url(url_or_path)
    if url.get_backend_name() == "sqlite":
        db = url.database or ""
        if not db or db == ":memory:":
            raise ValueError("an in-memory SQLite store cannot be shared by the writer thread and readers; "
                             "pass a file path")
        if read_only:
            if not Path(db).is_file():
                raise FileNotFoundError(f"store {db} does not exist; run a training job or `envace store "
                                        f"upgrade {db}` first")
            # a read-only connection cannot create the WAL side files; they exist while any writer is open
            # and SQLite >= 3.22 reads a WAL database read-only in either case
            url = make_url(f"sqlite:///file:{quote(db)}?mode=ro&uri=true")
        else:
            Path(db).parent.mkdir(parents=True, exist_ok=True)
        engine = sa.create_engine(url, echo=echo)
        _sqlite_setup(engine, read_only)
        return engine
    if url.get_driver_name() == "psycopg":
        from envace.extras import check

        check("psycopg", "postgres", "a PostgreSQL store")
    kwargs: dict = {"echo": echo, "pool_pre_ping": True}
    if read_only and url.get_backend_name() == "postgresql":
        kwargs["connect_args"] = {"options": "-c default_transaction_read_only=on"}
    return sa.create_engine(url, **kwargs)


@contextmanager
def read_only_session(url_or_path: str | Path | URL) -> Iterator[Session]:
    """A session that cannot write (for the dashboard). Disposes its engine on exit."""
    engine = make_engine(url_or_path, read_only=True)
    try:
        with Session(engine) as s:
            yield s
    finally:
        engine.dispose()


def alembic_config(engine: Engine):  # -> alembic.config.Config
    from alembic.config import Config

    cfg = Config(str(ALEMBIC_INI))
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.attributes["engine"] = engine
    return cfg


def _run_alembic(url_or_path: str | Path | URL | Engine, fn_name: str, revision: str) -> None:
    from alembic import command

    engine = url_or_path if isinstance(url_or_path, Engine) else make_engine(url_or_path)
    try:
        getattr(command, fn_name)(alembic_config(engine), revision)
    finally:
        if engine is not url_or_path:
            engine.dispose()


class StoreSchemaError(ValueError):
    """The store's schema revision does not match this code's; the message has both and the fix."""


def _script():  # -> alembic.script.ScriptDirectory
    from alembic.script import ScriptDirectory

    return ScriptDirectory(str(MIGRATIONS_DIR))


def head_revision() -> str:
    """The newest schema revision this code's migrations know."""
    return str(_script().get_current_head())


def _label(url_or_path: str | Path | URL | Engine) -> str:
    from envace.secrets import mask_text

    url = url_or_path.url if isinstance(url_or_path, Engine) else url_or_path
    return mask_text(url.render_as_string(hide_password=True) if isinstance(url, URL) else str(url))


def check_revision(url_or_path: str | Path | URL | Engine, *, allow_older: bool = True,
                   label: str | None = None) -> str | None:
    """The store's revision, after checking this code can use it: a revision the migrations do not know
    (a newer envace wrote the store) raises StoreSchemaError; so does an older one unless `allow_older`
    (a writer upgrades it; a reader such as the dashboard cannot). `label` names the store in the message
    (default: its URL, password masked)."""
    current = current_revision(url_or_path)
    where = _label(label if label is not None else url_or_path)
    if current is None:
        return None
    known = {rev.revision for rev in _script().walk_revisions()}
    head = head_revision()
    if current not in known:
        raise StoreSchemaError(f"store {where} has schema revision {current}, written by a newer "
                               f"envace; this code knows revisions up to {head}; upgrade envace to the version "
                               f"that wrote it, or point at another store")
    if current != head and not allow_older:
        raise StoreSchemaError(f"store {where} has schema revision {current}, older than this code's "
                               f"{head}; run `envace store upgrade {where}` (keeps every row)")
    return current


def upgrade(url_or_path: str | Path | URL | Engine, revision: str = "head") -> None:
    """Create or migrate the schema to `revision` (idempotent; safe from concurrent processes). A store
    newer than the code is StoreSchemaError (`check_revision`)."""
    check_revision(url_or_path)
    _run_alembic(url_or_path, "upgrade", revision)


def downgrade(url_or_path: str | Path | URL | Engine, revision: str = "base") -> None:
    _run_alembic(url_or_path, "downgrade", revision)


def current_revision(url_or_path: str | Path | URL | Engine) -> str | None:
    from alembic.runtime.migration import MigrationContext

    engine = url_or_path if isinstance(url_or_path, Engine) else make_engine(url_or_path)
    try:
        with engine.connect() as conn:
            return MigrationContext.configure(conn).get_current_revision()
    finally:
        if engine is not url_or_path:
            engine.dispose()
