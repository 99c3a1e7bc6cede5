"""A sweep that builds its own SFT checkpoint first (a Prefect task, cached by a key file), trains from
it through {sft:NAME}, and evaluates the SFT model itself as the base (no-RL) row of the table."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from mlflow.tracking import MlflowClient

from envace.sweeps.cells import executions
from envace.sweeps.grid import slugify

pytestmark = [pytest.mark.flows, pytest.mark.usefixtures("pinned_code_version")]



def test_sweep_builds_its_sft_once_and_reports_the_base_row(prefect_harness, write_sweep, toy_eval, toy_sft,
                                                           tmp_path):
    from envace_flows.sweep import run_sweep_from_file

    sft_out = tmp_path / "sft" / "toy"
    path = write_sweep(tmp_path, "with-sft", {"variant": {"envace": []}}, eval_overrides=toy_eval,
                       sft={"toy": {"out": str(sft_out), **toy_sft}}, baselines={"base": "toy"})
    spec = __import__("yaml").safe_load(path.read_text())
    spec["overrides"] = ["model={sft:toy}", *spec["overrides"][1:]]  # train from the sweep's own SFT
    path.write_text(__import__("yaml").safe_dump(spec, sort_keys=False))

    first = run_sweep_from_file(path)
    assert first["failed"] == {}
    assert first["sft"]["toy"]["cached"] is False and (sft_out / "model" / "config.json").is_file()
    assert sorted(first["executed"]) == ["variant=base,seed=0", "variant=envace,seed=0"]
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    trained = client.get_run(first["child_runs"]["variant=envace,seed=0"])
    assert trained.data.params.get("model") == str(sft_out / "model")
    table = pd.read_csv(first["results_csv"])
    base_row = table[(table["group"] == "variant=base") & (table["metric"] == "eval/world/success")].iloc[0]
    base_run = client.get_run(first["child_runs"]["variant=base,seed=0"])
    assert base_row["mean"] == pytest.approx(base_run.data.metrics["eval/world/success"])
    # the paired report: one seed, so the per-task mean difference is the difference of the two cells' means
    paired = pd.read_csv(Path(first["out_dir"]) / "results" / "paired.csv")
    (row,) = paired[paired["kind"] == "vs base"].to_dict("records")
    assert row["comparison"] == "variant=envace − variant=base" and row["seeds"] == 0
    assert row["success_diff"] == pytest.approx(trained.data.metrics["eval/world/success"]
                                                - base_run.data.metrics["eval/world/success"])
    assert row["success_task_lo"] <= row["success_diff"] <= row["success_task_hi"]
    assert row["n"] == 1 and row["success_verdict"] == "fewer than 3 seeds: no seed-level claim"
    # the records a re-analysis without training starts from
    assert (Path(first["out_dir"]) / "results" / "records.json").is_file()
    assert first["paired"][0]["comparison"] == row["comparison"]

    again = run_sweep_from_file(path)
    assert again["sft"]["toy"]["cached"] is True and again["executed"] == []
    for name in ("variant=base,seed=0", "variant=envace,seed=0"):
        cell_dir = Path(first["out_dir"]) / "cells" / slugify(name)
        assert len([e for e in executions(cell_dir) if e["event"] == "start"]) == 1
