"""The Prefect evaluate flow takes the same EvalConfig as `envace eval`: benchmark data paths and model
slots. FinMCP-Bench runs from the project's fixture file beside the tool world; the default benchmark
list holds vita / finmcp only when their data paths are set (so the default flow no longer fails on them)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

pytestmark = pytest.mark.flows

FINMCP = Path(__file__).resolve().parents[1] / "fixtures" / "bench" / "finmcp" / "benchmark_synthetic.json"


def test_default_benchmarks_follow_the_configured_paths(tmp_path):
    from envace.config import load_config
    from envace.evaluation.config import EvalConfig
    from envace_flows.evaluate import default_benchmarks

    local = load_config(EvalConfig, None, [], model=str(tmp_path))
    assert default_benchmarks(local) == ["world", "bfcl", "tau2"]
    with_data = load_config(EvalConfig, None, [f"paths.finmcp={FINMCP}", f"paths.vita={tmp_path}"], model="m")
    assert default_benchmarks(with_data) == ["world", "bfcl", "tau2", "vita", "finmcp"]
    endpoint = load_config(EvalConfig, None, ["policy.base_url=http://127.0.0.1:9/v1", "policy.model=m",
                                              "benchmarks=[bfcl]"])
    assert default_benchmarks(endpoint) == ["bfcl", "tau2"]  # no tool world without a local model


def test_flow_runs_finmcp_from_paths_beside_the_world(prefect_harness, tiny_model, toy_eval, tmp_path):
    from envace_flows.evaluate import evaluate_checkpoint

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    out = evaluate_checkpoint(str(tiny_model), ["world", "finmcp"], [*toy_eval, "bench_limit=1",
                                                                     "policy.max_tokens=8"],
                              out_dir=str(tmp_path / "ev"), mlflow_uri=uri, paths={"finmcp": str(FINMCP)})
    assert out["failed"] == {} and set(out["results"]) == {"world", "finmcp"}
    saved = json.loads((tmp_path / "ev" / "finmcp" / "eval.json").read_text())
    fin = saved["benchmarks"]["results"]["finmcp"]
    assert fin["k"] == 1 and [r["id"] for r in fin["records"]] == ["f1"]  # k=1 from toy_eval, first record only
    assert saved["models"]["policy"]["model_dir"] == str(tiny_model)
    run = MlflowClient(tracking_uri=uri).get_run(out["mlflow_run_id"])
    for metric in ("TF1_macro", "TP_micro", "EMR"):  # the report's FinMCP metrics are percentages of the groups
        assert run.data.metrics[f"eval/finmcp/report/finmcp/{metric}"] == pytest.approx(100 * fin["groups"][metric])
    assert run.data.metrics["eval/world/success"] == pytest.approx(out["results"]["world"]["world"]["success"])
