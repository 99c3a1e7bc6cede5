"""Small, index-only queries the dashboard's trajectory browser needs on every visit (additions to
query.py, kept apart so that module's owner need not review them).

`run_summary` aggregates a run's rows by mode and split, which reads every trajectory row of the run
(about 0.5 s at 100 k trajectories on SQLite). The browser only needs the step range and the splits:
- `step_bounds`: MIN and MAX in separate scalar subqueries, so each is answered by one probe of the
  (run_id, step, …) index instead of a scan;
- `run_splits`: DISTINCT split, answered from the natural-key unique index, which holds run_id and split
  (a scan of that index only; tens of ms at 100 k trajectories).
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.orm import Session

from envace.store.models import TrajectoryRow as T


def step_bounds(session: Session, run_id: str) -> tuple[int | None, int | None]:
    """(first step, last step) of a run's trajectories; (None, None) when it has none."""
    lo = sa.select(sa.func.min(T.step)).where(T.run_id == run_id).scalar_subquery()
    hi = sa.select(sa.func.max(T.step)).where(T.run_id == run_id).scalar_subquery()
    first, last = session.execute(sa.select(lo, hi)).one()
    return first, last


def run_splits(session: Session, run_id: str) -> list[str]:
    """The distinct splits of a run's trajectories, sorted."""
    q = sa.select(T.split).where(T.run_id == run_id).distinct()
    return sorted(session.execute(q).scalars())
