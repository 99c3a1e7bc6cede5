"""envace.store.dashboard_queries on the seeded store: values against the seeding inputs, and the SQLite
plan that keeps the step bounds an index probe (no scan of the run)."""

from __future__ import annotations

from sqlalchemy import event
from sqlalchemy.orm import Session

from envace.store.dashboard_queries import run_splits, step_bounds
from envace.store.session import make_engine, read_only_session


def test_step_bounds_and_splits_match_the_seeded_rows(seeded):
    with read_only_session(seeded.store) as s:
        for run in ("run-a", "run-b"):
            steps = [r[1] for r in seeded.rows if r[0] == run]
            assert step_bounds(s, run) == (min(steps), max(steps))
            assert run_splits(s, run) == sorted({r[3] for r in seeded.rows if r[0] == run})
        assert step_bounds(s, "no-such-run") == (None, None)
        assert run_splits(s, "no-such-run") == []


def test_step_bounds_is_answered_by_index_probes(seeded):
    engine = make_engine(seeded.store, read_only=True)
    seen: list[tuple] = []
    event.listen(engine, "before_cursor_execute",
                 lambda conn, cur, stmt, params, ctx, many: seen.append((stmt, params)))
    try:
        with Session(engine) as s:
            step_bounds(s, "run-a")
            stmt, params = next((q, p) for q, p in seen if "min" in q.lower())
            plan = [row[3] for row in s.connection().exec_driver_sql("EXPLAIN QUERY PLAN " + stmt, params)]
    finally:
        engine.dispose()
    searches = [p for p in plan if p.startswith("SEARCH trajectories")]
    assert len(searches) == 2 and all("INDEX" in p and "run_id=?" in p for p in searches), plan
    assert not any(p.startswith("SCAN trajectories") for p in plan), plan
