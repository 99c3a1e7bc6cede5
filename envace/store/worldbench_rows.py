"""Worldbench scores in the trajectory store, in the tables that already exist (no migration).

One store run per scored row (a reference row or a model), kind `eval`, named `worldbench:<row>`, its id a
hash of the row name and the config (a re-put of the same scoring replaces that run's rows). One
trajectory per transition: benchmark `worldbench`, split = the source, domain = the source's domain,
prompt_id = the transition id, prompt_index = its position in the scored list, reward = leaf F1, and
`reward_breakdown` holding the tool, the call kind, every score and the error flags. Its prediction is a
`fidelity_pairs` row (the rehearsed text and value next to the real value, with exact / json_valid /
schema_ok = shape / field_f1), the table the dashboard already reads rehearsed-vs-real pairs from.

`worldbench_runs` and `worldbench_pairs` are the dashboard's read side (filters: source, tool, a score
range).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from envace.store.models import FidelityPair, Run, RunKind, RunStatus, TrajectoryMode, TrajectoryRow, utcnow
from envace.store.runs import RunInfo, register_run, set_run_status
from envace.store.session import make_engine
from envace.types import Mode
from envace.untrusted import clean_text

BENCHMARK = "worldbench"


def worldbench_run_id(row: str, config: Mapping[str, Any] | None) -> str:
    digest = hashlib.sha256(json.dumps([row, config], sort_keys=True, default=str).encode()).hexdigest()
    return f"wb-{digest[:24]}"


def put_worldbench_scores(url: str, row: str, scores: Sequence[Mapping[str, Any]], *,
                          config: Mapping[str, Any] | None = None, mlflow_run_id: str | None = None) -> str:
    """Replace the run of `row` with these per-transition scores (TransitionScore.to_dict()); its id."""
    run_id = worldbench_run_id(row, config)
    engine = make_engine(url)
    try:
        register_run(engine, RunInfo(id=run_id, name=f"{BENCHMARK}:{row}"[:256], kind=RunKind.EVAL,
                                     config=dict(config or {}), mlflow_run_id=mlflow_run_id))
        T, F = TrajectoryRow.__table__, FidelityPair.__table__
        now = utcnow()
        with engine.begin() as conn:
            old = sa.select(T.c.id).where(T.c.run_id == run_id)
            conn.execute(F.delete().where(F.c.trajectory_id.in_(old)))
            conn.execute(T.delete().where(T.c.run_id == run_id))
            for i, s in enumerate(scores):
                if not isinstance(s, Mapping) or "id" not in s:
                    raise ValueError(f"worldbench score {i} of row {row!r} is not a TransitionScore dict")
                breakdown = {k: s.get(k) for k in ("tool", "kind", "json_valid", "exact", "shape", "leaf_f1",
                                                   "real_error", "pred_error", "note")}
                tid = conn.execute(T.insert().values(
                    run_id=run_id, step=0, split=str(s["source"])[:64], prompt_id=str(s["id"])[:128], prompt_index=i,
                    sample_index=0, mode=TrajectoryMode.EVAL, rollout_mode=Mode.REHEARSE,
                    domain=str(s.get("domain", ""))[:128], reward=float(s.get("leaf_f1") or 0.0), n_turns=1,
                    n_tool_calls=1, env_calls=0, role_mask=0, reward_breakdown=breakdown, created_at=now,
                    benchmark=BENCHMARK, error=s.get("note") or None)).inserted_primary_key[0]
                conn.execute(F.insert().values(
                    trajectory_id=tid, turn_index=0, tool_name=str(s.get("tool", ""))[:128], call=s.get("call"),
                    rehearsed_text=clean_text(str(s.get("predicted_text") or "")), rehearsed=s.get("predicted"),
                    real=s.get("real"), exact_match=bool(s.get("exact")), json_valid=bool(s.get("json_valid")),
                    schema_ok=bool(s.get("shape")), field_f1=float(s.get("leaf_f1") or 0.0)))
        set_run_status(engine, run_id, RunStatus.FINISHED)
    finally:
        engine.dispose()
    return run_id


@dataclass
class WorldbenchPair:
    transition: str
    source: str
    domain: str
    tool: str
    kind: str
    call: Any
    predicted_text: str
    predicted: Any
    real: Any
    json_valid: bool
    exact: bool
    shape: bool
    leaf_f1: float
    real_error: bool
    pred_error: bool


def worldbench_runs(session: Session) -> list[tuple[str, str]]:
    """(run id, name) of every stored worldbench run, newest first."""
    T = TrajectoryRow
    ids = sa.select(T.run_id).where(T.benchmark == BENCHMARK).distinct()
    rows = session.execute(sa.select(Run.id, Run.name).where(Run.id.in_(ids)).order_by(Run.created_at.desc()))
    return [(r[0], r[1]) for r in rows]


def worldbench_pairs(session: Session, run_id: str, *, source: str | None = None, tool: str | None = None,
                     min_f1: float = 0.0, max_f1: float = 1.0, limit: int = 200) -> list[WorldbenchPair]:
    """The run's transitions with their prediction, filtered by source, tool and leaf-F1 range."""
    T, F = TrajectoryRow, FidelityPair
    q = (sa.select(T.prompt_id, T.split, T.domain, T.reward_breakdown, F.tool_name, F.call, F.rehearsed_text,
                   F.rehearsed, F.real, F.json_valid, F.exact_match, F.schema_ok, F.field_f1)
         .join(F, F.trajectory_id == T.id)
         .where(T.run_id == run_id, T.benchmark == BENCHMARK, F.field_f1 >= min_f1, F.field_f1 <= max_f1)
         .order_by(T.prompt_index).limit(limit))
    if source:
        q = q.where(T.split == source)
    if tool:
        q = q.where(F.tool_name == tool)
    out = []
    for r in session.execute(q):
        b = r.reward_breakdown or {}
        out.append(WorldbenchPair(transition=r.prompt_id, source=r.split, domain=r.domain, tool=r.tool_name,
                                  kind=str(b.get("kind", "")), call=r.call, predicted_text=r.rehearsed_text,
                                  predicted=r.rehearsed, real=r.real, json_valid=r.json_valid, exact=r.exact_match,
                                  shape=r.schema_ok, leaf_f1=r.field_f1, real_error=bool(b.get("real_error")),
                                  pred_error=bool(b.get("pred_error"))))
    return out


def worldbench_facets(session: Session, run_id: str) -> tuple[list[str], list[str]]:
    """(sources, tools) present in a run, for the dashboard's filters."""
    T, F = TrajectoryRow, FidelityPair
    sources = session.execute(sa.select(T.split).where(T.run_id == run_id).distinct().order_by(T.split)).scalars()
    tools = session.execute(sa.select(F.tool_name).join(T, F.trajectory_id == T.id)
                            .where(T.run_id == run_id).distinct().order_by(F.tool_name)).scalars()
    return list(sources), list(tools)
