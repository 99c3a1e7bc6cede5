"""Benchmark trajectories in the store and the dashboard, through the real `envace eval`
command on two benchmarks (BFCL from its installed package, FinMCP from the fixture data file) with the
random tiny model: the store holds one trajectory per task × attempt, with the messages, score and error
of the per-task record eval.json holds; running the same command again reuses the same store runs and
adds no row; the dashboard's trajectory page (Streamlit AppTest) filters them by benchmark and opens one
as its message list, and its Benchmarks page shows the report the run logged to MLflow beside the paper's rows."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa

FINMCP = Path(__file__).resolve().parents[1] / "fixtures" / "bench" / "finmcp" / "benchmark_synthetic.json"
K, LIMIT = 2, 2


def envace(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "MLFLOW_ENABLE_TELEMETRY": "false"}
    env.pop("ENVACE_DEBUG", None)
    return subprocess.run([sys.executable, "-m", "envace.cli", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=900)


def stored(store: Path) -> list:
    engine = sa.create_engine(f"sqlite:///{store}")
    with engine.connect() as c:
        rows = c.execute(sa.text(
            "SELECT t.id, t.run_id, t.benchmark, t.split, t.prompt_id, t.sample_index, t.step, t.mode, t.reward, "
            "t.error, (SELECT count(*) FROM turns u WHERE u.trajectory_id = t.id) AS n_rows FROM trajectories t "
            "ORDER BY t.benchmark, t.prompt_id, t.sample_index")).all()
    engine.dispose()
    return rows


def record_score(r: dict) -> float:  # the adapters' records: tau2 / vita / bfcl carry reward, finmcp valid
    return float(r["reward"]) if r.get("reward") is not None else float(bool(r.get("valid")))


@pytest.mark.slow
@pytest.mark.dashboard
def test_eval_on_two_benchmarks_stores_each_task_attempt_once_and_the_dashboard_filters_them(
        tiny_dir, tmp_path, monkeypatch):
    store, mlflow_uri, out = tmp_path / "store.db", f"sqlite:///{tmp_path / 'mlflow.db'}", tmp_path / "out"
    cmd = ["eval", str(tiny_dir), "--benchmarks", "bfcl,finmcp", "--finmcp", str(FINMCP),
           "bench.bfcl_categories=[simple_python]", "-k", str(K), f"bench_limit={LIMIT}", "policy.max_tokens=8",
           "device=cpu", "threads=1", f"out_dir={out}", "tracking.enabled=true", f"tracking.mlflow_uri={mlflow_uri}",
           f"tracking.store_url={store}"]
    first = envace(*cmd, cwd=tmp_path)
    assert first.returncode == 0, first.stderr[-4000:]
    data = json.loads((out / "eval.json").read_text())
    results = data["benchmarks"]["results"]
    rows = stored(store)

    # one trajectory per (task, attempt) of each benchmark, keyed as its eval.json record says
    for name in ("bfcl", "finmcp"):
        records = results[name]["records"]
        assert len(records) == LIMIT * K and len({(r["id"], r["sample"]) for r in records}) == LIMIT * K
        mine = [r for r in rows if r.benchmark == name]
        assert sorted((r.split, r.prompt_id, r.sample_index) for r in mine) == \
            sorted((rec["category"], rec["id"], rec["sample"]) for rec in records)
        by_key = {(r.prompt_id, r.sample_index): r for r in mine}
        for rec in records:
            row = by_key[(rec["id"], rec["sample"])]
            assert row.reward == pytest.approx(record_score(rec)) and row.mode == "eval"
            assert row.step == results[name]["seed"] and (row.error is None) == (rec["task_error"] is None)
            assert row.n_rows == len(rec["messages"]) > 0  # every message of the conversation is a stored turn
        assert {r.run_id for r in mine} == {data["store"]["run_ids"][name]}  # one store run per benchmark
        assert data["store"]["counts"][name] == {"new": LIMIT * K, "already_stored": 0}
    assert data["store"]["run_ids"]["bfcl"] != data["store"]["run_ids"]["finmcp"]

    # the same checkpoint x benchmark x seed again: the same runs, no new row
    second = envace(*cmd, cwd=tmp_path)
    assert second.returncode == 0, second.stderr[-4000:]
    again = json.loads((out / "eval.json").read_text())
    assert again["store"]["run_ids"] == data["store"]["run_ids"]
    assert again["store"]["counts"] == {n: {"new": 0, "already_stored": LIMIT * K} for n in ("bfcl", "finmcp")}
    assert [tuple(r) for r in stored(store)] == [tuple(r) for r in rows]
    engine = sa.create_engine(f"sqlite:///{store}")
    with engine.connect() as c:
        runs = dict(c.execute(sa.text("SELECT id, status FROM runs")).all())
    engine.dispose()
    assert runs == {data["store"]["run_ids"]["bfcl"]: "finished", data["store"]["run_ids"]["finmcp"]: "finished"}

    # the dashboard's trajectory page, filtered by benchmark
    from streamlit.testing.v1 import AppTest

    from envace.dashboard_launch import app_path

    monkeypatch.setenv("ENVACE_DASHBOARD_STORE", str(store))
    monkeypatch.setenv("ENVACE_DASHBOARD_MLFLOW_URI", mlflow_uri)
    at = AppTest.from_file(str(app_path()), default_timeout=120).run()
    at.switch_page("views/trajectories.py").run()
    assert not at.exception, [e.value for e in at.exception]
    for name in ("finmcp", "bfcl"):
        at.selectbox(key="benchmark").set_value(name)
        at.run()
        assert not at.exception, [e.value for e in at.exception]
        options = at.selectbox(key="run").options  # only this benchmark's run is offered
        assert len(options) == 1 and data["store"]["run_ids"][name] in options[0]
        table = next(d.value for d in at.dataframe if "prompt" in d.value.columns)
        assert set(table["benchmark"]) == {name}
        assert sorted(zip(table["prompt"], table["sample"])) == \
            sorted((r["id"], r["sample"]) for r in results[name]["records"])
    # open one BFCL trajectory: its messages, as the record holds them, shown as text
    rec = results["bfcl"]["records"][0]
    row = next(r for r in rows if r.benchmark == "bfcl" and (r.prompt_id, r.sample_index) == (rec["id"], rec["sample"]))
    at.number_input(key="open_id").set_value(row.id)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    codes = [c.value for c in at.code]
    user_text = next(m["content"] for m in rec["messages"] if m["role"] == "user")
    assert user_text in codes
    assert any(f"Trajectory #{row.id} · bfcl" in h.value for h in at.subheader)

    # the Benchmarks page: the report that `envace eval` logged to MLflow, our scores beside the paper's rows
    at.switch_page("views/benchmarks.py").run()
    assert not at.exception, [e.value for e in at.exception]
    assert not at.info, [i.value for i in at.info]  # e.g. "No benchmark reports yet": the run logged none
    table = next(d.value for d in at.dataframe if "Overall" in d.value.columns).set_index("model")
    assert table.loc["EnvACE-8B (paper)"].tolist() == [46.04, 36.7, 16.0, 32.91]  # the paper's main table
    (ours,) = [m for m in table.index if not m.endswith("(paper)")]
    assert table.loc[ours, "BFCL-v4"] == pytest.approx(100.0 * results["bfcl"]["overall"])
    assert table.loc[ours, ["τ²-Bench", "VitaBench", "Overall"]].isna().all()  # not run: no Overall
