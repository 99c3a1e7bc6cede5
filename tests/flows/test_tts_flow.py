"""The TTS sweep flow on Prefect's real engine: N x mode x seed evaluation cells of one checkpoint, a
child run per cell, and `tts/results.csv` whose means/CIs equal those recomputed from the child runs."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest
from mlflow.tracking import MlflowClient

from envace.tracking.mlflow_run import child_runs

pytestmark = pytest.mark.flows


def test_tts_sweep_cells_runs_and_table(prefect_harness, tiny_model, toy_eval, tmp_path):
    from envace_flows.tts_sweep import tts_sweep

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    summary = tts_sweep(model=str(tiny_model), out_dir=str(tmp_path / "tts"), n_values=[0, 1],
                        modes=["parallel", "sequential"], seeds=[0, 1],
                        eval_overrides=[*toy_eval, "rollout.act.temperature=0.7"], mlflow_uri=uri)
    groups = ["tts.n=0,tts.mode=parallel", "tts.n=1,tts.mode=parallel", "tts.n=1,tts.mode=sequential"]
    assert summary["failed"] == {}
    assert sorted(summary["cells"]) == sorted(f"{g},seed={s}" for g in groups for s in (0, 1))
    kids = child_runs(uri, summary["parent_run_id"])
    assert len(kids) == 6
    client = MlflowClient(tracking_uri=uri)
    assert "tts/results.csv" in {a.path for a in client.list_artifacts(summary["parent_run_id"], "tts")}

    # recompute every mean from the child runs' own metrics (the cell's run params carry tts.n / tts.mode)
    table = pd.read_csv(summary["results_csv"])
    for group in groups:
        values = []
        for run_id in kids:
            run = client.get_run(run_id)
            if run.data.tags["envace.group"] == group:
                assert run.data.params["tts.n"] == group.split(",")[0].split("=")[1]
                values.append(run.data.metrics["eval/world/success"])
        assert len(values) == 2
        row = table[(table.group == group) & (table.metric == "eval/world/success")].iloc[0]
        assert row["n"] == 2 and row["mean"] == pytest.approx(sum(values) / 2)
        spread = abs(values[0] - values[1])
        # two seeds: half-width = t_{0.975,1} * s / sqrt(2) = 12.7062 * |a-b| / 2
        assert (math.isclose(row["ci95"], 12.7062 * spread / 2, rel_tol=1e-4, abs_tol=1e-9))
    # the TTS report: the plain run (N=0) is the first point of both modes' lines; the plot is logged too
    report = pd.read_csv(Path(summary["results_csv"]).parent / "tts_table.csv")
    main = report[report.metric == "eval/world/success"]
    assert [(r.mode, r.N) for r in main.itertuples()] == [("parallel", 0), ("parallel", 1), ("sequential", 0),
                                                           ("sequential", 1)]
    base = table[(table.group == groups[0]) & (table.metric == "eval/world/success")].iloc[0]["mean"]
    assert list(main[main.N == 0]["mean"]) == pytest.approx([base, base])
    assert {"tts/tts_plot.html", "tts/tts_table.csv"} <= {a.path for a in client.list_artifacts(
        summary["parent_run_id"], "tts")}
