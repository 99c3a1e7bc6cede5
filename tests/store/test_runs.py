"""Run records: idempotent registration, status updates, listing."""

from __future__ import annotations

import pytest

from envace.store.models import RunKind, RunStatus
from envace.store.query import get_run, list_runs
from envace.store.runs import RunInfo, ensure_run, register_run, set_run_status
from envace.store.session import make_engine, read_only_session, upgrade


def test_register_update_and_list(store_url):
    upgrade(store_url)
    engine = make_engine(store_url)
    register_run(engine, RunInfo("sweep-1", name="grid", kind="sweep", config={"n": [1, 2]}))
    for i in (1, 2):
        register_run(engine, RunInfo(f"child-{i}", kind=RunKind.TRAIN, parent_id="sweep-1", git_commit="abc"))
    register_run(engine, RunInfo("child-1", mlflow_run_id="m-1"))  # a resumed job adds its MLflow id
    ensure_run(engine, "child-1")  # never clobbers
    set_run_status(engine, "child-2", "failed")
    with pytest.raises(KeyError, match="register it first"):
        set_run_status(engine, "ghost", RunStatus.FINISHED)
    engine.dispose()
    with read_only_session(store_url) as s:
        c1 = get_run(s, "child-1")
        assert (c1.kind, c1.parent_id, c1.git_commit, c1.mlflow_run_id) == (RunKind.TRAIN, "sweep-1", "abc", "m-1")
        assert get_run(s, "child-2").status is RunStatus.FAILED
        assert get_run(s, "sweep-1").config == {"n": [1, 2]}
        kids = list_runs(s, parent_id="sweep-1")
        assert sorted(r.id for r in kids.items) == ["child-1", "child-2"] and kids.total == 2
        assert [r.id for r in list_runs(s, kind="sweep").items] == ["sweep-1"]
        assert list_runs(s, page=2, page_size=2).total == 3 and len(list_runs(s, page=2, page_size=2).items) == 1


def test_run_info_validation():
    with pytest.raises(ValueError, match="run kind 'training' is not one of"):
        RunInfo("r", kind="training")
    with pytest.raises(ValueError, match="at most 64 characters"):
        RunInfo("x" * 65)
