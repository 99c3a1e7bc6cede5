"""Idempotent insertion of trajectory bundles: one transaction, ON CONFLICT DO NOTHING on the natural key.

`insert_bundles` inserts the trajectory rows with `ON CONFLICT (natural key) DO NOTHING RETURNING id,
<natural key>`, then inserts children only for the trajectories that were actually new. So a key that is
already stored (a resumed run re-writing a step, or two processes writing the same key) keeps exactly
the first writer's trajectory *with its own children*: turns of two attempts are never mixed. A key
repeated within one batch is stored once, with the children of its first bundle.

Rows are inserted in natural-key order: two PostgreSQL transactions inserting overlapping keys then
wait on each other in the same order and cannot deadlock. Dialects without ON CONFLICT (MySQL, …) take
a slower path: one savepoint per trajectory, a duplicate key rolls back that savepoint only.

Speed: the rows arrive in storage form (rows.py), so SQLite and PostgreSQL get them at driver level,
without SQLAlchemy's per-row parameter processing (which cost more than the database itself): the
trajectories as multi-row `INSERT … VALUES (…), (…) ON CONFLICT DO NOTHING RETURNING` statements, the
children as `executemany` of positional tuples. The SQL text is SQLAlchemy's own compilation of the
table's INSERT for the dialect (quoting, PostgreSQL's bind casts), turned positional where needed.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import lru_cache
from operator import itemgetter
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection
from sqlalchemy.exc import DBAPIError, IntegrityError, OperationalError

from envace.store.models import (
    NATURAL_KEY,
    FidelityPair,
    RewardItem,
    TrajectoryRow,
    TurnRow,
)
from envace.store.rows import ITEM_COLUMNS, PAIR_COLUMNS, TURN_COLUMNS, Bundle
from envace.store.tts_models import COMMIT_COLUMNS, REHEARSAL_COLUMNS, TTSCommit, TTSRehearsal

_TRAJ = TrajectoryRow.__table__
_TRAJ_COLUMNS = tuple(c.name for c in _TRAJ.columns if c.name != "id")
_CHILDREN = ((TurnRow.__table__, "turns", TURN_COLUMNS), (RewardItem.__table__, "items", ITEM_COLUMNS),
             (FidelityPair.__table__, "pairs", PAIR_COLUMNS),
             (TTSCommit.__table__, "tts_commits", COMMIT_COLUMNS),
             (TTSRehearsal.__table__, "tts_rehearsals", REHEARSAL_COLUMNS))
# Columns a trajectory bundle may leave out (rows.to_bundle predates them; benchmark_rows.py sets them):
# filled in here, so every bundle reaches the driver with every column.
_OPTIONAL = (("benchmark", ""), ("error", None))
_NAMED = re.compile(r"%\((\w+)\)s")
_MAX_ROWS_PER_STATEMENT = 500


def _key_of(row: Any) -> tuple:
    mode = row.mode
    return (row.run_id, row.step, getattr(mode, "value", mode), row.prompt_index, row.sample_index, row.split)


def _positional_sql(table: sa.Table, dialect: Any, columns: tuple[str, ...]) -> tuple[str, tuple[str, ...]] | None:
    """(INSERT SQL with positional placeholders, parameter names in placeholder order) for `columns`, or
    None when the driver takes named parameters only."""
    compiled = table.insert().inline().compile(dialect=dialect, column_keys=list(columns))  # no implicit RETURNING
    sql = str(compiled)
    if compiled.positional:
        names = tuple(compiled.positiontup)
    elif dialect.paramstyle == "format" or (dialect.paramstyle == "pyformat"
                                           and dialect.driver in ("psycopg", "psycopg2")):
        names = tuple(_NAMED.findall(sql))  # psycopg takes %s as well as %(name)s
        sql = _NAMED.sub("%s", sql)
    else:
        return None
    if sorted(names) != sorted(columns):
        return None
    return sql, names


@dataclass(frozen=True)
class _TrajPlan:
    head: str  # INSERT INTO trajectories (…) VALUES
    row: str  # (?, ?, …) or (%s::VARCHAR, …)
    tail: str  # ON CONFLICT (…) DO NOTHING RETURNING id, …
    get: itemgetter
    procs: tuple[tuple[int, Any], ...]  # (position, dialect bind processor): SQLite's DATETIME text
    rows_per_statement: int


@lru_cache(maxsize=8)
def _traj_plan(dialect: Any, max_params: int) -> _TrajPlan | None:
    if dialect.name not in ("sqlite", "postgresql") or not getattr(dialect, "insert_returning", False):
        return None
    found = _positional_sql(_TRAJ, dialect, _TRAJ_COLUMNS)
    if found is None:
        return None
    sql, names = found
    head, sep, row = sql.partition(" VALUES ")
    if not sep or not (row.startswith("(") and row.endswith(")")):
        return None
    q = dialect.identifier_preparer.quote
    key = ", ".join(q(k) for k in NATURAL_KEY)
    tail = f" ON CONFLICT ({key}) DO NOTHING RETURNING {q('id')}, {key}"
    procs = []
    for pos, name in enumerate(names):
        col = _TRAJ.c[name]
        if isinstance(col.type, (sa.JSON, sa.Enum, sa.Float)):  # already JSON text / values / floats (rows.py)
            continue
        proc = col.type.dialect_impl(dialect).bind_processor(dialect)
        if proc is not None:
            procs.append((pos, proc))
    per = max(1, min(_MAX_ROWS_PER_STATEMENT, max_params // len(names)))
    return _TrajPlan(head + " VALUES ", row, tail, itemgetter(*names), tuple(procs), per)


def _max_params(conn: Connection) -> int:
    if conn.dialect.name == "sqlite":
        raw = conn.connection.dbapi_connection
        getlimit = getattr(raw, "getlimit", None)  # Python >= 3.11
        if getlimit is not None:
            import sqlite3

            return int(getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER))
        return 999  # the smallest default SQLite was ever built with
    return 65535  # PostgreSQL's protocol limit


def _python_values(row: dict[str, Any]) -> dict[str, Any]:
    """A storage-form trajectory row for SQLAlchemy's typed insert (its JSON type encodes by itself)."""
    out = dict(row)
    if out.get("reward_breakdown") is not None:
        out["reward_breakdown"] = json.loads(out["reward_breakdown"])
    return out


def _insert_trajectories(conn: Connection, bundles: list[Bundle]) -> dict[tuple, int]:
    """Natural key -> new id for the bundles whose key was not stored yet."""
    name = conn.dialect.name
    if name in ("sqlite", "postgresql"):
        plan = _traj_plan(conn.dialect, _max_params(conn))
        if plan is not None:
            new: dict[tuple, int] = {}
            per = plan.rows_per_statement
            for i in range(0, len(bundles), per):
                chunk = bundles[i:i + per]
                params: list[Any] = []
                memo: dict[tuple[int, Any], Any] = {}  # the rows of one put share created_at
                for b in chunk:
                    vals = plan.get(b.trajectory)
                    if plan.procs:
                        vals = list(vals)
                        for pos, proc in plan.procs:
                            v = vals[pos]
                            mk = (pos, v)
                            out = memo.get(mk, memo)
                            if out is memo:
                                out = memo[mk] = proc(v)
                            vals[pos] = out
                    params.extend(vals)
                sql = plan.head + ", ".join([plan.row] * len(chunk)) + plan.tail
                for r in conn.exec_driver_sql(sql, tuple(params)):
                    new[tuple(r[1:])] = r[0]
            return new
        mod = __import__(f"sqlalchemy.dialects.{name}", fromlist=["insert"])
        cols = [_TRAJ.c[k] for k in NATURAL_KEY]
        stmt = mod.insert(_TRAJ).on_conflict_do_nothing(index_elements=list(NATURAL_KEY)).returning(_TRAJ.c.id, *cols)
        return {_key_of(r): r.id for r in conn.execute(stmt, [_python_values(b.trajectory) for b in bundles])}
    new = {}
    for b in bundles:
        try:
            with conn.begin_nested():
                res = conn.execute(_TRAJ.insert().values(**_python_values(b.trajectory)))
                new[b.key()] = res.inserted_primary_key[0]
        except IntegrityError:
            continue
    return new


def insert_bundles(conn: Connection, bundles: list[Bundle]) -> int:
    """Insert inside the caller's transaction; returns how many trajectories were new."""
    if not bundles:
        return 0
    bundles = sorted(bundles, key=Bundle.key)
    for b in bundles:
        t = b.trajectory
        for name, default in _OPTIONAL:
            if name not in t:
                t[name] = default
    new = _insert_trajectories(conn, bundles)
    if not new:
        return 0
    n_new = len(new)
    owners: list[tuple[int, Bundle]] = []
    for b in bundles:
        tid = new.pop(b.key(), None)  # popped: a key repeated in the batch gets its first bundle's children
        if tid is not None:
            owners.append((tid, b))
    for table, attr, columns in _CHILDREN:
        rows = [(tid, *r) for tid, b in owners for r in getattr(b, attr)]
        if rows:
            _bulk_insert(conn, table, columns, rows)
    return n_new


@lru_cache(maxsize=32)
def _bulk_plan(table: sa.Table, dialect: Any, columns: tuple[str, ...]) -> tuple[str, Any, tuple[str, ...]]:
    """(SQL, row -> parameters or None when a row already is them, parameter names)."""
    full = ("trajectory_id", *columns)
    if tuple(c.name for c in table.columns) != full:
        raise AssertionError(f"rows.py's column order for {table.name} is not the table's: {full}")
    found = _positional_sql(table, dialect, full)
    if found is not None:
        sql, names = found
        if names == full:
            return sql, None, names
        return sql, itemgetter(*(full.index(n) for n in names)), names
    compiled = table.insert().inline().compile(dialect=dialect)
    return str(compiled), lambda r: dict(zip(full, r)), full


def _bulk_insert(conn: Connection, table: sa.Table, columns: tuple[str, ...], rows: list[tuple]) -> None:
    """executemany straight on the driver: the children are most of the rows, and SQLAlchemy's per-row
    parameter processing costs more than the database itself. Rows are tuples in storage form (rows.py):
    trajectory_id, then `columns`."""
    sql, get, _ = _bulk_plan(table, conn.dialect, columns)
    conn.exec_driver_sql(sql, rows if get is None else [get(r) for r in rows])


def is_transient(exc: BaseException) -> bool:
    """Lock contention or a deadlock/serialization abort: retrying the transaction is correct."""
    if isinstance(exc, OperationalError):
        msg = str(exc.orig).lower() if exc.orig is not None else str(exc).lower()
        if "locked" in msg or "busy" in msg:
            return True
    if isinstance(exc, DBAPIError):
        if exc.connection_invalidated:
            return True
        code = getattr(exc.orig, "sqlstate", None) or getattr(exc.orig, "pgcode", None)
        return code in ("40001", "40P01")
    return False


def count_rows(conn: Connection, run_id: str | None = None) -> dict[str, int]:
    """Row counts per table (for tests and the benchmark)."""
    q = sa.select(sa.func.count()).select_from(_TRAJ)
    out = {"trajectories": conn.execute(q if run_id is None else q.where(_TRAJ.c.run_id == run_id)).scalar_one()}
    for table, _, _ in _CHILDREN:
        q = sa.select(sa.func.count()).select_from(table)
        if run_id is not None:
            q = q.join(_TRAJ, _TRAJ.c.id == table.c.trajectory_id).where(_TRAJ.c.run_id == run_id)
        out[table.name] = conn.execute(q).scalar_one()
    return out
