"""Per-arm training curves: seeds pooled per (grid point, metric, step) on hand-worked values, read back from a
real MLflow database (a resumed step keeps its first value), eval cells and unlogged metrics left out."""

from __future__ import annotations

import math

import pytest

from envace.sweeps.curves import curves_table, markdown_curves, metric_history, sweep_curves, write_curves

T_975_1 = 12.706205  # Student t, 0.975 quantile, 1 degree of freedom
T_975_2 = 4.302653


def test_seeds_pool_per_step_with_student_intervals():
    histories = [
        ("envace", {"shadow/exact_match": {0: 0.5, 1: 0.6, 2: 0.9}}),
        ("envace", {"shadow/exact_match": {0: 0.7, 1: 0.8}}),  # this seed's cell stopped after step 1
        ("envace", {"shadow/exact_match": {0: 0.6, 1: 0.7}}),
        ("grpo_env", {"reward/mean": {0: 0.25}}),
    ]
    t = curves_table(histories)
    assert list(t["group"]) == ["envace"] * 3 + ["grpo_env"]
    rows = {(r.group, r.metric, r.step): r for r in t.itertuples()}
    s0 = rows[("envace", "shadow/exact_match", 0)]
    # by hand: values 0.5, 0.7, 0.6 -> mean 0.6, s = 0.1, half = 4.302653 * 0.1 / sqrt(3)
    assert s0.n == 3 and s0.mean == pytest.approx(0.6)
    assert s0.high - s0.mean == pytest.approx(T_975_2 * 0.1 / math.sqrt(3), rel=1e-6)
    s1 = rows[("envace", "shadow/exact_match", 1)]
    assert s1.n == 3 and s1.mean == pytest.approx(0.7) and s1.low == pytest.approx(0.7 - T_975_2 * 0.1 / math.sqrt(3))
    s2 = rows[("envace", "shadow/exact_match", 2)]
    assert s2.n == 1 and s2.mean == pytest.approx(0.9) and math.isnan(s2.low) and math.isnan(s2.high)
    g = rows[("grpo_env", "reward/mean", 0)]
    assert g.n == 1 and g.mean == 0.25
    assert ("grpo_env", "shadow/exact_match", 0) not in rows  # never logged: no row, not a zero


def test_two_seeds_use_one_degree_of_freedom():
    t = curves_table([("a", {"m": {3: 0.2}}), ("a", {"m": {3: 0.4}})])
    (r,) = t.itertuples()
    # s = 0.141421, half = 12.706205 * 0.141421 / sqrt(2) = 1.2706205
    assert r.mean == pytest.approx(0.3) and r.high - r.mean == pytest.approx(T_975_1 * 0.1, rel=1e-6)


def test_markdown_shows_first_middle_and_last_step():
    t = curves_table([("a", {"m": {0: 0.1, 1: 0.2, 2: 0.3, 3: 0.4}}), ("a", {"m": {0: 0.1, 1: 0.2, 2: 0.5, 3: 0.4}})])
    md = markdown_curves(t)
    assert md.splitlines()[0] == "| grid point | metric | step 0 | step 2 | step 3 |"
    half = T_975_1 * math.sqrt(0.02) / math.sqrt(2)  # step 2: 0.3 and 0.5
    assert md.splitlines()[2] == f"| a | m | 0.100 ± 0.000 | 0.400 ± {half:.3f} | 0.400 ± 0.000 |"
    assert markdown_curves(curves_table([])) == "(no training curves)"


@pytest.fixture
def mlflow_runs(tmp_path):
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(tracking_uri=uri)
    exp = client.create_experiment("curves", artifact_location=str(tmp_path / "art"))
    runs = {}
    for name, values in (("s0", [0.5, 0.6, 0.7]), ("s1", [0.7, 0.8, 0.9])):
        run = client.create_run(exp, run_name=name).info.run_id
        for step, v in enumerate(values):
            client.log_metric(run, "shadow/exact_match", v, timestamp=1000 + step, step=step)
            client.log_metric(run, "reward/mean", v / 10, timestamp=1000 + step, step=step)
        runs[name] = run
    # s1 was killed after step 1 and resumed from its step-1 checkpoint: step 2 logged again, later
    client.log_metric(runs["s1"], "shadow/exact_match", 0.0, timestamp=5000, step=2)
    return uri, runs


def test_metric_history_keeps_the_first_value_of_a_re_logged_step(mlflow_runs):
    uri, runs = mlflow_runs
    assert metric_history(uri, runs["s1"], "shadow/exact_match") == pytest.approx({0: 0.7, 1: 0.8, 2: 0.9})
    assert metric_history(uri, runs["s0"], "rehearse/entropy") == {}
    assert metric_history(uri, None, "reward/mean") == {}


def test_sweep_curves_read_every_training_cell_and_write_csv_and_html(mlflow_runs, tmp_path):
    uri, runs = mlflow_runs
    records = [
        {"kind": "eval", "group": "variant=base", "mlflow_run_id": runs["s0"]},  # an eval cell has no steps
        {"kind": "train", "group": "variant=envace", "mlflow_run_id": runs["s0"]},
        {"kind": "train", "group": "variant=envace", "mlflow_run_id": runs["s1"]},
    ]
    t = sweep_curves(records, uri, metrics=("shadow/exact_match", "rehearse/entropy"))
    assert set(t["group"]) == {"variant=envace"} and set(t["metric"]) == {"shadow/exact_match"}
    assert t["mean"].tolist() == pytest.approx([0.6, 0.7, 0.8]) and t["n"].tolist() == [2, 2, 2]
    paths = write_curves(tmp_path / "results", t, "fair-arms")
    assert paths["curves.csv"].read_text().splitlines()[0] == "group,metric,step,n,mean,low,high"
    assert "variant=envace" in paths["curves.html"].read_text()
