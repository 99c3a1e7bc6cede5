"""Processes writing one store at once, and a writer killed with SIGKILL mid-ingest.

Workers are separate Python processes (not threads) writing deterministic synthetic trajectories, so
the expected content of every stored row can be recomputed here from its natural key.
"""

from __future__ import annotations

import json
import os
import signal
import time

import sqlalchemy as sa

from envace.store.models import FidelityPair, RewardItem, TrajectoryRow, TurnRow
from envace.store.session import make_engine
from envace.store.synthetic import stored_turns, synthetic_trajectory
from envace.types import Role

WORKER = """
import json, sys
from envace.store.synthetic import synthetic_trajectory
from envace.store.writer import TrajectoryWriter

url, run, spec = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
with TrajectoryWriter(url, run, batch_size=spec["batch"]) as w:
    for _ in range(spec.get("repeat", 1)):
        for step in spec["steps"]:
            trajs = [synthetic_trajectory(0, step, p, s) for p in spec["prompts"] for s in range(spec["samples"])]
            w.put(trajs, step=step)
print("done", w.n_inserted, w.n_skipped)
"""


def stored(url: str, run: str) -> dict[tuple, tuple[int, int, int, list[str]]]:
    """(step, prompt, sample) -> (n stored turns, n items, n pairs, turn texts in order)."""
    engine = make_engine(url)
    out: dict[tuple, tuple[int, int, int, list[str]]] = {}
    with engine.connect() as c:
        trajs = c.execute(sa.select(TrajectoryRow.id, TrajectoryRow.step, TrajectoryRow.prompt_index,
                                    TrajectoryRow.sample_index).where(TrajectoryRow.run_id == run)).all()
        texts: dict[int, list[str]] = {}
        for tid, text in c.execute(sa.select(TurnRow.trajectory_id, TurnRow.text).order_by(TurnRow.trajectory_id,
                                                                                           TurnRow.turn_index)):
            texts.setdefault(tid, []).append(text)
        items, pairs = ({tid: n for tid, n in c.execute(sa.select(m.trajectory_id, sa.func.count())
                                                             .group_by(m.trajectory_id))}
                        for m in (RewardItem, FidelityPair))
    engine.dispose()
    for tid, step, p, s in trajs:
        key = (step, p, s)
        assert key not in out, f"natural key {key} stored twice"
        out[key] = (len(texts.get(tid, [])), items.get(tid, 0), pairs.get(tid, 0), texts.get(tid, []))
    return out


def expected(key: tuple) -> tuple[int, int, int, list[str]]:
    t = synthetic_trajectory(0, *key)
    n_pairs = sum(1 for x in t.turns if x.role is Role.REHEARSE and x.real_observation is not None)
    gen_texts = [x.text for x in t.turns]
    return stored_turns(t), len(t.task.user_turns), n_pairs, gen_texts


def assert_complete(rows: dict) -> None:
    """Every stored trajectory has exactly its own turns, items and pairs (never half-written)."""
    for key, (n_turns, n_items, n_pairs, texts) in rows.items():
        want_turns, want_items, want_pairs, gen_texts = expected(key)
        assert (n_turns, n_items, n_pairs) == (want_turns, want_items, want_pairs), key
        assert [x for x in texts if not x.startswith("user turn")] == gen_texts, key


def test_four_processes_write_one_store_at_once(store_url, run_python):
    # 0 and 1 write the very same keys; 2 overlaps both; 3 writes its own keys twice
    specs = [
        {"prompts": list(range(0, 6)), "steps": [0, 1, 2], "samples": 2, "batch": 5},
        {"prompts": list(range(0, 6)), "steps": [2, 1, 0], "samples": 2, "batch": 3},
        {"prompts": list(range(4, 10)), "steps": [0, 1, 2, 3], "samples": 2, "batch": 7},
        {"prompts": list(range(10, 13)), "steps": [0, 1, 2, 3], "samples": 2, "batch": 4, "repeat": 2},
    ]
    procs = [run_python(WORKER, store_url, "run-c", json.dumps(s)) for s in specs]
    outs = [p.communicate(timeout=600) for p in procs]
    for p, (_, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, err
    want = {(st, p, s) for sp in specs for st in sp["steps"] for p in sp["prompts"] for s in range(sp["samples"])}
    rows = stored(store_url, "run-c")
    assert set(rows) == want
    assert_complete(rows)
    inserted = sum(int(out.split()[1]) for out, _ in outs)
    assert inserted == len(want)  # each key was inserted by exactly one process


def test_sigkill_mid_ingest_leaves_only_whole_trajectories(store_url, run_python):
    # enough work that the worker cannot finish between its first commit and the kill (~50 ms later)
    spec = {"prompts": list(range(4)), "steps": list(range(600)), "samples": 3, "batch": 4}
    proc = run_python(WORKER, store_url, "run-k", json.dumps(spec))
    engine = make_engine(store_url)
    deadline = time.monotonic() + 300
    n = 0
    while n == 0:
        assert proc.poll() is None, proc.communicate()[1]
        assert time.monotonic() < deadline, "the worker committed nothing in 300 s"
        time.sleep(0.05)
        try:
            with engine.connect() as c:
                n = c.execute(sa.select(sa.func.count()).select_from(TrajectoryRow)).scalar_one()
        except sa.exc.DBAPIError:  # the schema is still being created
            n = 0
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    engine.dispose()
    total = len(spec["prompts"]) * len(spec["steps"]) * spec["samples"]
    rows = stored(store_url, "run-k")
    assert 0 < len(rows) < total  # killed mid-ingest, not before or after
    assert_complete(rows)
    # resume: the same writes again complete the run, every key exactly once
    again = run_python(WORKER, store_url, "run-k", json.dumps(spec))
    out, err = again.communicate(timeout=600)
    assert again.returncode == 0, err
    rows = stored(store_url, "run-k")
    assert len(rows) == total
    assert_complete(rows)
