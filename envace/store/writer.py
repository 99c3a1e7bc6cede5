"""`TrajectoryWriter`: batched, idempotent inserts of trajectories on a background thread.

The trainer calls `put(trajectories, step, mode, split)` (the rows are converted on the caller's thread,
a snapshot), `flush()` at every checkpoint (blocks until everything put so far is committed) and
`close()` at the end. A background thread commits bundles in transactions of `batch_size` trajectories,
or whatever is pending once the oldest of it has waited `max_delay` seconds, so the dashboard sees a step
within about a second even while steps keep coming (and a checkpoint's `flush` finds little to do).
Large transactions matter for bulk ingest: every commit rewrites the index pages its rows touch, and
the reward / prompt indexes take rows all over; 1024 trajectories per commit ingest a million turns
~15 % faster than 256 (bench/store_bench.py). A training step smaller than that commits on the quiet.

Guarantees:
- a trajectory commits together with all its turns, items and pairs (one transaction per batch), so a
  process killed at any point leaves no half-written trajectory;
- re-writing a natural key (run, step, mode, prompt_index, sample_index, split) is a no-op (ingest.py), so
  a run resumed from its last checkpoint re-writes the steps after it without duplicates, and every step
  before it was flushed; `discard_after(step)` instead drops the crashed attempt's rows of later steps,
  for a trainer whose re-run of a step may differ from the first attempt;
- lock contention and deadlock aborts are retried; any other error is kept and re-raised by the next
  `put`, `flush` or `close` (and every one after: rows were lost, so the writer stays failed).
"""

from __future__ import annotations

import atexit
import queue
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import URL, Engine

from envace.store.ingest import insert_bundles, is_transient
from envace.store.models import TrajectoryMode, TrajectoryRow, utcnow
from envace.store.rows import Bundle, to_bundle
from envace.store.runs import RunInfo, ensure_run, register_run
from envace.store.session import make_engine, upgrade
from envace.types import Trajectory


class StoreWriteError(RuntimeError):
    """The writer thread failed to commit; the cause is chained."""


_STOP = object()


class TrajectoryWriter:
    """Write trajectories of one run to the store at `url` (a path or SQLAlchemy URL)."""

    def __init__(self, url: str | Path | URL, run_id: str, *, batch_size: int = 1024, run: RunInfo | None = None,
                 create_schema: bool = True, max_delay: float = 1.0, queue_size: int = 64,
                 max_retries: int = 8) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size={batch_size} must be >= 1")
        if run is not None and run.id != run_id:
            raise ValueError(f"run.id {run.id!r} differs from run_id {run_id!r}; pass the same id")
        self.run_id = run_id
        self.batch_size = batch_size
        self.max_delay = max_delay
        self.max_retries = max_retries
        self.engine: Engine = make_engine(url)
        if create_schema:
            upgrade(self.engine)
        if run is not None:
            register_run(self.engine, run)
        else:
            ensure_run(self.engine, run_id)
        self.n_inserted = 0  # trajectories that were new
        self.n_skipped = 0  # trajectories whose natural key was already stored
        self._queue: queue.Queue = queue.Queue(maxsize=queue_size)
        self._error: BaseException | None = None
        self._closed = False
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._loop, name=f"store-writer-{run_id}", daemon=True)
        self._thread.start()
        atexit.register(self._at_exit)  # a forgotten close() must not drop the queued rows at exit

    # ----- caller side --------------------------------------------------------------------------
    def put(self, trajectories: Iterable[Trajectory], step: int, mode: TrajectoryMode | str = TrajectoryMode.TRAIN,
            split: str = "train") -> int:
        """Queue trajectories of one step; returns how many were queued. Raises a pending writer error."""
        self._check()
        try:
            mode = TrajectoryMode(mode)
        except ValueError:
            raise ValueError(f"mode {mode!r} is not one of {[m.value for m in TrajectoryMode]}") from None
        now = utcnow()  # one created_at per put: the step's trajectories were stored together
        bundles = [to_bundle(t, self.run_id, step, mode, split, now) for t in trajectories]
        if bundles:
            self._enqueue(bundles)
        return len(bundles)

    def flush(self) -> None:
        """Block until everything put so far is committed; raises the writer's error if any."""
        self._check()
        done = threading.Event()
        self._enqueue(done)
        while not done.wait(0.5):
            if not self._thread.is_alive():
                raise StoreWriteError("store writer thread died") from self._error
        self._check()

    def discard_after(self, step: int) -> int:
        """Delete this run's trajectories of steps after `step` (with their turns, items and pairs);
        returns how many. A trainer resuming from the checkpoint of `step` calls it first, so the steps
        it re-runs are stored as re-run, not as a mix of the crashed attempt and the new one."""
        self.flush()
        table = TrajectoryRow.__table__
        with self.engine.begin() as conn:
            res = conn.execute(sa.delete(table).where(table.c.run_id == self.run_id, table.c.step > step))
        return int(res.rowcount or 0)

    def close(self) -> None:
        """Flush, stop the thread and release the engine. Idempotent; raises a pending error."""
        if self._closed:
            self._check(closing=True)
            return
        try:
            if self._thread.is_alive():
                self._enqueue(_STOP)
                self._thread.join()
        finally:
            self._closed = True
            atexit.unregister(self._at_exit)
            self._optimize()
            self.engine.dispose()
        self._check(closing=True)

    def _at_exit(self) -> None:
        if not self._closed:
            self.close()  # an error here is printed by the interpreter, not swallowed

    def __enter__(self) -> TrajectoryWriter:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _check(self, closing: bool = False) -> None:
        if self._error is not None:
            raise StoreWriteError(f"writing trajectories of run {self.run_id!r} failed: {self._error!r}") \
                from self._error
        if self._closed and not closing:
            raise RuntimeError(f"TrajectoryWriter of run {self.run_id!r} is closed")

    def _enqueue(self, item: Any) -> None:
        while True:
            try:
                self._queue.put(item, timeout=0.5)
                return
            except queue.Full:
                if not self._thread.is_alive():
                    raise StoreWriteError("store writer thread died") from self._error

    # ----- writer thread ------------------------------------------------------------------------
    def _loop(self) -> None:
        pending: list[Bundle] = []
        deadline = 0.0  # when the oldest pending bundle has waited max_delay
        while True:
            if pending and time.monotonic() >= deadline:
                self._commit(pending)
            try:
                item = self._queue.get(timeout=max(0.0, deadline - time.monotonic()) if pending else None)
            except queue.Empty:
                continue  # the deadline passed: committed at the top
            if isinstance(item, list):
                if not pending:
                    deadline = time.monotonic() + self.max_delay
                pending.extend(item)
                if len(pending) >= self.batch_size:
                    self._commit(pending)
            elif isinstance(item, threading.Event):
                self._commit(pending)
                item.set()
            elif item is _STOP:
                self._commit(pending)
                return

    def _commit(self, pending: list[Bundle]) -> None:
        """Commit and empty `pending`, `batch_size` bundles per transaction. After an error, drop rows."""
        batches = [pending[i:i + self.batch_size] for i in range(0, len(pending), self.batch_size)]
        pending.clear()
        for batch in batches:
            if self._error is not None:
                return
            try:
                new = self._commit_batch(batch)
            except BaseException as exc:  # noqa: BLE001 - re-raised on the caller's thread
                self._error = exc
                return
            with self._lock:
                self.n_inserted += new
                self.n_skipped += len(batch) - new

    def _commit_batch(self, batch: list[Bundle]) -> int:
        for attempt in range(self.max_retries + 1):
            try:
                with self.engine.begin() as conn:
                    return insert_bundles(conn, batch)
            except Exception as exc:
                if attempt == self.max_retries or not is_transient(exc):
                    raise
                time.sleep(min(2.0, 0.05 * 2 ** attempt))
        raise AssertionError("unreachable")

    def _optimize(self) -> None:
        """Refresh SQLite's planner statistics of the table every dashboard query starts from (exact: a
        sampled ANALYZE misjudges the per-run selectivity; well under a second at 100 k trajectories).
        PostgreSQL's autovacuum keeps its own statistics."""
        if self.engine.dialect.name != "sqlite" or self._error is not None or self.n_inserted == 0:
            return
        try:
            with self.engine.connect() as conn:
                raw = conn.connection.dbapi_connection
                raw.execute("ANALYZE trajectories")
        except Exception:  # noqa: BLE001 - statistics are an optimisation; never fail a close on them
            pass
