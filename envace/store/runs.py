"""Run records: register a run (idempotently) and update its status.

`register_run` is safe to call from every process of a run and again after a resume: the first call
inserts the row, later calls fill in fields that were given and leave the others alone. The stored config
has its secrets masked (`envace.secrets`: a URL password never reaches the store). A run ends FINISHED,
FAILED or KILLED through `set_run_status` or `register_run` (`envace.tracking.run_record.RunRecord.close`
ends every run of a job).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from envace.secrets import mask_secrets
from envace.store.models import Run, RunKind, RunStatus, utcnow


@dataclass
class RunInfo:
    id: str
    name: str = ""
    kind: RunKind = RunKind.TRAIN
    status: RunStatus = RunStatus.RUNNING
    config: dict[str, Any] | None = None
    git_commit: str | None = None
    mlflow_run_id: str | None = None
    parent_id: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not self.id or len(self.id) > 64:
            raise ValueError(f"run id {self.id!r} must be a non-empty string of at most 64 characters")
        self.kind = _coerce(RunKind, self.kind, "kind")
        self.status = _coerce(RunStatus, self.status, "status")


def _coerce(cls: type, value: Any, name: str) -> Any:
    try:
        return cls(value)
    except ValueError:
        raise ValueError(f"run {name} {value!r} is not one of {[m.value for m in cls]}") from None


def _insert_ignore(conn: Connection, table: sa.Table, row: dict[str, Any]) -> None:
    name = conn.dialect.name
    if name in ("sqlite", "postgresql"):
        mod = __import__(f"sqlalchemy.dialects.{name}", fromlist=["insert"])
        conn.execute(mod.insert(table).values(**row).on_conflict_do_nothing())
        return
    exists = conn.execute(sa.select(table.c.id).where(table.c.id == row["id"])).first()
    if exists is None:
        conn.execute(table.insert().values(**row))


def register_run(target: Engine | Connection, info: RunInfo) -> None:
    """Insert the run if missing; otherwise update the fields given (non-None, non-default name)."""
    table = Run.__table__
    config = mask_secrets(info.config) if info.config is not None else None
    row = {"id": info.id, "name": info.name, "kind": info.kind, "status": info.status, "config": config,
           "git_commit": info.git_commit, "mlflow_run_id": info.mlflow_run_id, "parent_id": info.parent_id,
           "created_at": utcnow(), "updated_at": utcnow()}
    updates = {k: v for k, v in row.items()
               if k in ("config", "git_commit", "mlflow_run_id", "parent_id") and v is not None}
    if info.name:
        updates["name"] = info.name
    updates["status"] = info.status

    def work(conn: Connection) -> None:
        _insert_ignore(conn, table, row)
        conn.execute(sa.update(table).where(table.c.id == info.id).values(**updates, updated_at=utcnow()))

    if isinstance(target, Engine):
        with target.begin() as conn:
            work(conn)
    else:
        work(target)


def set_run_status(target: Engine | Connection, run_id: str, status: RunStatus | str) -> None:
    status = _coerce(RunStatus, status, "status")
    table = Run.__table__
    stmt = sa.update(table).where(table.c.id == run_id).values(status=status, updated_at=utcnow())
    if isinstance(target, Engine):
        with target.begin() as conn:
            res = conn.execute(stmt)
    else:
        res = target.execute(stmt)
    if res.rowcount == 0:
        raise KeyError(f"run {run_id!r} is not in the store; register it first (register_run)")


def get_run_status(target: Engine | Connection, run_id: str) -> RunStatus | None:
    """The run's status, or None when the run is not in the store."""
    table = Run.__table__
    stmt = sa.select(table.c.status).where(table.c.id == run_id)
    if isinstance(target, Engine):
        with target.connect() as conn:
            value = conn.execute(stmt).scalar()
    else:
        value = target.execute(stmt).scalar()
    return None if value is None else RunStatus(value)


def ensure_run(target: Engine | Connection, run_id: str) -> None:
    """Insert a minimal run row if `run_id` is missing; never changes an existing run."""
    info = RunInfo(id=run_id)
    row = {"id": info.id, "name": "", "kind": info.kind, "status": info.status, "config": None,
           "git_commit": None, "mlflow_run_id": None, "parent_id": None,
           "created_at": utcnow(), "updated_at": utcnow()}
    if isinstance(target, Engine):
        with target.begin() as conn:
            _insert_ignore(conn, Run.__table__, row)
    else:
        _insert_ignore(target, Run.__table__, row)
