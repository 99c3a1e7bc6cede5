"""Idempotent insertion of trajectory bundles: one transaction, ON CONFLICT DO NOTHING on the natural key.

`insert_bundles` inserts the trajectory rows with `ON CONFLICT (natural key) DO NOTHING RETURNING id,
<natural key>`, then inserts children only for the trajectories that were actually new. So a key that is
already stored (a resumed run re-writing a step, or two processes writing the same key) keeps exactly
the first writer's trajectory *with its own children*: turns of two attempts are never mixed.

Rows are inserted in natural-key order: two PostgreSQL transactions inserting overlapping keys then
wait on each other in the same order and cannot deadlock. Dialects without ON CONFLICT (MySQL, …) take
a slower path: one savepoint per trajectory, a duplicate key rolls back that savepoint only.
"""

from __future__ import annotations

from collections.abc import Callable
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
from envace.store.rows import Bundle

_TRAJ = TrajectoryRow.__table__
_CHILDREN = ((TurnRow.__table__, "turns"), (RewardItem.__table__, "items"), (FidelityPair.__table__, "pairs"))


def _key_of(row: Any) -> tuple:
    mode = row.mode
    return (row.run_id, row.step, getattr(mode, "value", mode), row.prompt_index, row.sample_index, row.split)


def _insert_trajectories(conn: Connection, bundles: list[Bundle]) -> dict[tuple, int]:
    """Natural key -> new id for the bundles whose key was not stored yet."""
    name = conn.dialect.name
    rows = [b.trajectory for b in bundles]
    if name in ("sqlite", "postgresql"):
        mod = __import__(f"sqlalchemy.dialects.{name}", fromlist=["insert"])
        cols = [_TRAJ.c[k] for k in NATURAL_KEY]
        stmt = mod.insert(_TRAJ).on_conflict_do_nothing(index_elements=list(NATURAL_KEY)).returning(_TRAJ.c.id, *cols)
        return {_key_of(r): r.id for r in conn.execute(stmt, rows)}
    new: dict[tuple, int] = {}
    for b in bundles:
        try:
            with conn.begin_nested():
                res = conn.execute(_TRAJ.insert().values(**b.trajectory))
                new[b.key()] = res.inserted_primary_key[0]
        except IntegrityError:
            continue
    return new


def insert_bundles(conn: Connection, bundles: list[Bundle]) -> int:
    """Insert inside the caller's transaction; returns how many trajectories were new."""
    if not bundles:
        return 0
    bundles = sorted(bundles, key=Bundle.key)
    new = _insert_trajectories(conn, bundles)
    if not new:
        return 0
    for table, attr in _CHILDREN:
        rows: list[dict[str, Any]] = []
        for b in bundles:
            tid = new.get(b.key())
            if tid is None:
                continue
            for r in getattr(b, attr):
                r["trajectory_id"] = tid
                rows.append(r)
        if rows:
            _bulk_insert(conn, table, rows)
    return len(new)


@lru_cache(maxsize=32)
def _bulk_plan(table: sa.Table, dialect: Any) -> tuple[str, Callable[[dict], Any] | None, tuple[str, ...]]:
    compiled = table.insert().compile(dialect=dialect)
    if compiled.positional:
        names = tuple(compiled.positiontup)
        return str(compiled), itemgetter(*names), names
    return str(compiled), None, tuple(c.name for c in table.columns)


def _bulk_insert(conn: Connection, table: sa.Table, rows: list[dict[str, Any]]) -> None:
    """executemany straight on the driver: the children are most of the rows, and SQLAlchemy's per-row
    parameter processing costs more than the database itself. Rows must be in storage form (rows.py)
    and hold every column."""
    sql, get, names = _bulk_plan(table, conn.dialect)
    try:
        params = [get(r) for r in rows] if get is not None else [{n: r[n] for n in names} for r in rows]
    except KeyError as exc:
        raise ValueError(f"row for table {table.name} lacks column {exc.args[0]!r}") from None
    conn.exec_driver_sql(sql, params)


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
    for table, _ in _CHILDREN:
        q = sa.select(sa.func.count()).select_from(table)
        if run_id is not None:
            q = q.join(_TRAJ, _TRAJ.c.id == table.c.trajectory_id).where(_TRAJ.c.run_id == run_id)
        out[table.name] = conn.execute(q).scalar_one()
    return out
