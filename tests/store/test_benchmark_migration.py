"""`envace store upgrade` on a store written before benchmark trajectories existed (schema 0002_tts): the
old trajectories keep every value and read benchmark '' and error NULL; benchmark trajectories then go in
beside them, and the dashboard's benchmark filter separates the two."""

from __future__ import annotations

import json
import subprocess
import sys

import sqlalchemy as sa
from sqlalchemy.orm import Session

from envace.store.benchmark_query import stored_benchmarks
from envace.store.benchmark_rows import put_benchmark_records
from envace.store.query import TrajectoryFilter, list_trajectories
from envace.store.session import current_revision, make_engine, upgrade


def test_store_upgrade_migrates_an_old_store_in_place(tmp_path):
    db = tmp_path / "old.db"
    upgrade(db, "0002_tts")  # the schema before 0003_benchmarks, with one training trajectory in it
    engine = make_engine(db)
    with engine.begin() as c:
        c.execute(sa.text("INSERT INTO runs (id, name, kind, status, created_at, updated_at) "
                          "VALUES ('old', 'train-1', 'train', 'finished', '2026-11-30', '2026-11-30')"))
        c.execute(sa.text(
            "INSERT INTO trajectories (run_id, step, split, prompt_id, prompt_index, sample_index, mode, rollout_mode, "
            "domain, reward, n_turns, n_tool_calls, env_calls, role_mask, created_at) VALUES "
            "('old', 3, 'train', 'task-9', 9, 1, 'train', 'rehearse', 'retail', 0.75, 2, 1, 0, 4, '2026-11-30')"))
    engine.dispose()

    done = subprocess.run([sys.executable, "-m", "envace.cli", "store", "upgrade", str(db)], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout)["revision"] == current_revision(db)
    assert current_revision(db) not in ("0001", "0002_tts")

    engine = make_engine(db)
    with engine.connect() as c:
        old = c.execute(sa.text("SELECT step, prompt_id, reward, benchmark, error FROM trajectories")).one()
    assert tuple(old) == (3, "task-9", 0.75, "", None)
    with engine.begin() as c:
        c.execute(sa.text("INSERT INTO runs (id, name, kind, status, created_at, updated_at) "
                          "VALUES ('ev', 'eval', 'eval', 'finished', '2026-12-01', '2026-12-01')"))
    put_benchmark_records(engine, "ev", "bfcl", [{"id": "simple_0", "category": "simple", "valid": True}], seed=0)
    with Session(engine) as s:
        assert stored_benchmarks(s) == ["bfcl"]
        world = list_trajectories(s, TrajectoryFilter(benchmark=""))
        bench = list_trajectories(s, TrajectoryFilter(benchmark="bfcl"))
    engine.dispose()
    assert [t.prompt_id for t in world.items] == ["task-9"] and world.items[0].benchmark == ""
    assert [(t.prompt_id, t.reward, t.error) for t in bench.items] == [("simple_0", 1.0, None)]
