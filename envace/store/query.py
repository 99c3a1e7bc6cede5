"""The dashboard's query API over the trajectory store. Every list is paginated; nothing loads a run.

`list_trajectories` filters (run(s), step range, split, mode, reward range, role present, termination,
prompt, domain, text substring) and sorts (`step`, `reward`, `n_turns`, `created`, `id`; `-` for
descending), always tie-broken by id so pages are stable. The total is a *bounded* count (counting stops
at `count_limit`; `Page.total_exact` says so), which keeps a page fast on million-row runs.

Ordering of unscored trajectories (reward NULL): they sort as the lowest reward — first for `reward`,
last for `-reward` — on every database (SQLite's native order; PostgreSQL is told NULLS FIRST/LAST).
The text filter is a case-insensitive substring match over every turn's text (ASCII case folding on
SQLite); it is a scan of the run's turns, so it is the one filter whose cost grows with the run.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from envace.fidelity import ToolFidelity
from envace.store.models import (
    ROLE_BITS,
    FidelityPair,
    RewardItem,
    Run,
    RunKind,
    TrajectoryMode,
    TrajectoryRow,
    TurnRow,
)
from envace.store.records import (
    FidelityRecord,
    ModeStats,
    Page,
    RewardItemRecord,
    RoleStats,
    RunRecord,
    RunSummary,
    StepPoint,
    TrajectoryRecord,
    TrajectorySummary,
    TurnRecord,
)
from envace.types import Role, TerminationReason

T = TrajectoryRow
SORT_KEYS = {"step": T.step, "reward": T.reward, "n_turns": T.n_turns, "created": T.created_at, "id": T.id}
MAX_PAGE_SIZE = 1000


def _enum(cls: type, value: Any, name: str) -> Any:
    if value is None:
        return None
    try:
        return cls(value)
    except ValueError:
        raise ValueError(f"filter {name}={value!r} is not one of {[m.value for m in cls]}") from None


@dataclass
class TrajectoryFilter:
    """All fields optional; given fields are AND-ed. Ranges are inclusive."""

    run_id: str | None = None
    run_ids: Sequence[str] | None = None
    step_min: int | None = None
    step_max: int | None = None
    split: str | None = None
    mode: TrajectoryMode | str | None = None
    reward_min: float | None = None
    reward_max: float | None = None
    role: Role | str | None = None  # trajectories having at least one turn of this role
    termination: TerminationReason | str | None = None
    prompt_id: str | None = None
    domain: str | None = None
    text: str | None = None  # substring of any turn's text, case-insensitive
    benchmark: str | None = None  # "bfcl", "tau2", ...; "" = the tool world and training

    def __post_init__(self) -> None:
        self.mode = _enum(TrajectoryMode, self.mode, "mode")
        self.role = _enum(Role, self.role, "role")
        self.termination = _enum(TerminationReason, self.termination, "termination")
        for lo, hi in (("step_min", "step_max"), ("reward_min", "reward_max")):
            a, b = getattr(self, lo), getattr(self, hi)
            if a is not None and b is not None and a > b:
                raise ValueError(f"filter {lo}={a} is greater than {hi}={b}; swap them")
        if self.run_ids is not None and isinstance(self.run_ids, str):
            raise ValueError("filter run_ids must be a list of run ids; use run_id for one run")

    def clauses(self) -> list[Any]:
        c: list[Any] = []
        if self.run_id is not None:
            c.append(T.run_id == self.run_id)
        if self.run_ids is not None:
            c.append(T.run_id.in_(list(self.run_ids)))
        if self.step_min is not None:
            c.append(T.step >= self.step_min)
        if self.step_max is not None:
            c.append(T.step <= self.step_max)
        if self.split is not None:
            c.append(T.split == self.split)
        if self.mode is not None:
            c.append(T.mode == self.mode)
        if self.reward_min is not None:
            c.append(T.reward >= self.reward_min)
        if self.reward_max is not None:
            c.append(T.reward <= self.reward_max)
        if self.termination is not None:
            c.append(T.termination == self.termination)
        if self.prompt_id is not None:
            c.append(T.prompt_id == self.prompt_id)
        if self.domain is not None:
            c.append(T.domain == self.domain)
        if self.benchmark is not None:
            c.append(T.benchmark == self.benchmark)
        if self.role is not None:
            bit = ROLE_BITS.get(self.role)
            c.append(T.role_mask.op("&")(bit) != 0 if bit is not None else
                     sa.exists().where(TurnRow.trajectory_id == T.id, TurnRow.role == self.role))
        if self.text:
            c.append(sa.exists().where(TurnRow.trajectory_id == T.id,
                                       TurnRow.text.icontains(self.text, autoescape=True)))
        return c


def _order(sort: str, dialect: str) -> list[Any]:
    desc = sort.startswith("-")
    key = sort[1:] if desc else sort
    if key not in SORT_KEYS:
        raise ValueError(f"sort {sort!r} is not one of {sorted(SORT_KEYS)} (prefix '-' for descending)")
    col = SORT_KEYS[key]
    first = col.desc() if desc else col.asc()
    if key == "reward" and dialect == "postgresql":  # SQLite already orders NULL lowest
        first = first.nulls_last() if desc else first.nulls_first()
    return [first] if key == "id" else [first, T.id.desc() if desc else T.id.asc()]


def _dataclass_from(cls: type, row: Any) -> Any:
    m = row._mapping
    return cls(**{f.name: m[f.name] for f in fields(cls)})


_SUMMARY_COLS = [T.__table__.c[f.name] for f in fields(TrajectorySummary)]


def list_trajectories(session: Session, filt: TrajectoryFilter | None = None, sort: str = "step", page: int = 1,
                      page_size: int = 50, count_limit: int = 10_000) -> Page[TrajectorySummary]:
    """One page of trajectory summaries (page numbers start at 1)."""
    if page < 1:
        raise ValueError(f"page={page} must be >= 1 (pages are numbered from 1)")
    if not 1 <= page_size <= MAX_PAGE_SIZE:
        raise ValueError(f"page_size={page_size} must be between 1 and {MAX_PAGE_SIZE}")
    clauses = (filt or TrajectoryFilter()).clauses()
    order = _order(sort, session.get_bind().dialect.name)
    offset = (page - 1) * page_size
    # the bounded count first: when it proves the page is empty, the page query is skipped (a rare
    # filter then costs one walk of the index, not two)
    inner = sa.select(T.id).where(*clauses).limit(count_limit + 1).subquery()
    n = session.execute(sa.select(sa.func.count()).select_from(inner)).scalar_one()
    items: list[TrajectorySummary] = []
    if not (n <= count_limit and offset >= n):
        # ids from one covering index, then the rows of those ids only (a late row lookup)
        ids = sa.select(T.id).where(*clauses).order_by(*order).limit(page_size).offset(offset)
        q = sa.select(*_SUMMARY_COLS).where(T.id.in_(ids.scalar_subquery())).order_by(*order)
        items = [_dataclass_from(TrajectorySummary, r) for r in session.execute(q)]
    return Page(items, total=min(n, count_limit), page=page, page_size=page_size, total_exact=n <= count_limit)


def get_trajectory(session: Session, trajectory_id: int) -> TrajectoryRecord | None:
    """A trajectory with all its turns, checklist items and fidelity pairs; None when absent."""
    row = session.execute(sa.select(*_SUMMARY_COLS, T.reward_breakdown).where(T.id == trajectory_id)).first()
    if row is None:
        return None
    rec = TrajectoryRecord(_dataclass_from(TrajectorySummary, row), row.reward_breakdown)
    q = (sa.select(*[TurnRow.__table__.c[c] for c in TurnRecord.COLUMNS])
         .where(TurnRow.trajectory_id == trajectory_id).order_by(TurnRow.turn_index))
    rec.turns.extend(TurnRecord.from_row(r._mapping) for r in session.execute(q))  # typed as the Turn was
    parts = ((RewardItem, RewardItemRecord, RewardItem.position, rec.reward_items),
             (FidelityPair, FidelityRecord, FidelityPair.turn_index, rec.fidelity_pairs))
    for model, cls, order, out in parts:
        cols = [model.__table__.c[f.name] for f in fields(cls)]
        q = sa.select(*cols).where(model.trajectory_id == trajectory_id).order_by(order)
        out.extend(_dataclass_from(cls, r) for r in session.execute(q))
    return rec


_RUN_COLS = [Run.__table__.c[f.name] for f in fields(RunRecord)]


def list_runs(session: Session, kind: RunKind | str | None = None, parent_id: str | None = None, page: int = 1,
              page_size: int = 50) -> Page[RunRecord]:
    """Runs, newest first."""
    if page < 1 or not 1 <= page_size <= MAX_PAGE_SIZE:
        raise ValueError(f"page={page} must be >= 1 and page_size={page_size} between 1 and {MAX_PAGE_SIZE}")
    c = []
    if kind is not None:
        c.append(Run.kind == _enum(RunKind, kind, "kind"))
    if parent_id is not None:
        c.append(Run.parent_id == parent_id)
    q = sa.select(*_RUN_COLS).where(*c).order_by(Run.created_at.desc(), Run.id)
    rows = session.execute(q.limit(page_size).offset((page - 1) * page_size)).all()
    total = session.execute(sa.select(sa.func.count()).select_from(Run).where(*c)).scalar_one()
    return Page([_dataclass_from(RunRecord, r) for r in rows], total=total, page=page, page_size=page_size)


def get_run(session: Session, run_id: str) -> RunRecord | None:
    row = session.execute(sa.select(*_RUN_COLS).where(Run.id == run_id)).first()
    return None if row is None else _dataclass_from(RunRecord, row)


def run_summary(session: Session, run_id: str) -> RunSummary | None:
    """Counts and mean rewards per (mode, split), step range and termination counts of one run."""
    run = get_run(session, run_id)
    if run is None:
        return None
    q = (sa.select(T.mode, T.split, sa.func.count(), sa.func.count(T.reward), sa.func.avg(T.reward),
                   sa.func.min(T.step), sa.func.max(T.step))
         .where(T.run_id == run_id).group_by(T.mode, T.split).order_by(T.mode, T.split))
    by_mode, first, last, total = [], None, None, 0
    for mode, split, n, n_scored, mean, lo, hi in session.execute(q):
        by_mode.append(ModeStats(mode, split, n, n_scored, None if mean is None else float(mean)))
        total += n
        first = lo if first is None else min(first, lo)
        last = hi if last is None else max(last, hi)
    tq = sa.select(T.termination, sa.func.count()).where(T.run_id == run_id).group_by(T.termination)
    terms = {(t.value if t is not None else "none"): n for t, n in session.execute(tq)}
    return RunSummary(run, total, first, last, by_mode, dict(sorted(terms.items())))


def step_curve(session: Session, run_id: str, mode: TrajectoryMode | str | None = None,
               split: str | None = None) -> list[StepPoint]:
    """Per-step reward means of a run (learning curves), one aggregate query."""
    filt = TrajectoryFilter(run_id=run_id, mode=mode, split=split)
    q = (sa.select(T.step, sa.func.count(), sa.func.count(T.reward), sa.func.avg(T.reward), sa.func.avg(T.n_turns))
         .where(*filt.clauses()).group_by(T.step).order_by(T.step))
    return [StepPoint(s, n, ns, None if m is None else float(m), float(mt)) for s, n, ns, m, mt in session.execute(q)]


def role_stats(session: Session, filt: TrajectoryFilter) -> list[RoleStats]:
    """Per-role turn counts, token means, advantage means and parse errors over the filtered
    trajectories (pass a step range on big runs: this aggregates over turns)."""
    ids = sa.select(T.id).where(*filt.clauses()).scalar_subquery()
    q = (sa.select(TurnRow.role, sa.func.count(), sa.func.avg(TurnRow.n_tokens), sa.func.avg(TurnRow.advantage),
                   sa.func.count(TurnRow.parse_error))
         .where(TurnRow.trajectory_id.in_(ids)).group_by(TurnRow.role).order_by(TurnRow.role))
    return [RoleStats(r, n, float(tok or 0.0), None if adv is None else float(adv), ne)
            for r, n, tok, adv, ne in session.execute(q)]


def fidelity_by_tool(session: Session, run_id: str, step_min: int | None = None, step_max: int | None = None,
                     mode: TrajectoryMode | str | None = None) -> list[ToolFidelity]:
    """Rehearsal fidelity per tool (mean scores over the run's rehearsed-vs-real pairs)."""
    filt = TrajectoryFilter(run_id=run_id, step_min=step_min, step_max=step_max, mode=mode)
    F = FidelityPair
    def rate(col: Any) -> Any:  # PostgreSQL cannot CAST(boolean AS float)
        return sa.func.avg(sa.case((col, 1.0), else_=0.0))

    q = (sa.select(F.tool_name, sa.func.count(), rate(F.json_valid), rate(F.schema_ok), rate(F.exact_match),
                   sa.func.avg(F.field_f1))
         .join(T, T.id == F.trajectory_id).where(*filt.clauses()).group_by(F.tool_name).order_by(F.tool_name))
    return [ToolFidelity(t, n, float(a), float(b), float(c), float(d)) for t, n, a, b, c, d in session.execute(q)]
