"""The evaluation flow fans out one task per benchmark; a failing benchmark does not stop the others."""

from __future__ import annotations

import pytest
from mlflow.tracking import MlflowClient

pytestmark = pytest.mark.flows


def test_one_task_per_benchmark_and_failures_named(prefect_harness, tiny_model, toy_eval, tmp_path):
    from prefect.client.orchestration import get_client

    from envace_flows.evaluate import evaluate_checkpoint

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    state = evaluate_checkpoint(str(tiny_model), ["world", "no_such_benchmark"], toy_eval, out_dir=str(tmp_path / "ev"),
                                mlflow_uri=uri, return_state=True)
    out = state.result()
    assert set(out["results"]) == {"world"}
    assert list(out["failed"]) == ["no_such_benchmark"] and "unknown benchmark" in out["failed"]["no_such_benchmark"]
    world = out["results"]["world"]["world"]
    assert (tmp_path / "ev" / "world" / "eval.json").is_file()
    run = MlflowClient(tracking_uri=uri).get_run(out["mlflow_run_id"])
    assert run.data.metrics["eval/world/success"] == pytest.approx(world["success"])
    assert run.data.tags["envace.failed_benchmarks"] == "no_such_benchmark"

    with get_client(sync_client=True) as client:  # two task runs of the flow run, one per benchmark
        from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

        flow_run = FlowRunFilter(id=FlowRunFilterId(any_=[state.state_details.flow_run_id]))
        runs = client.read_task_runs(flow_run_filter=flow_run)
    names = sorted(r.name for r in runs)
    assert names == ["eval[no_such_benchmark]", "eval[world]"]


def test_remote_benchmark_tasks_retry_with_backoff(prefect_harness, tiny_model, toy_eval, tmp_path):
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    from envace_flows.evaluate import evaluate_checkpoint

    state = evaluate_checkpoint(str(tiny_model), ["no_such_benchmark"], toy_eval, out_dir=str(tmp_path / "ev"),
                                mlflow_uri=f"sqlite:///{tmp_path / 'mlflow.db'}", remote=True, retries=2,
                                retry_backoff_s=0.0, return_state=True)
    assert list(state.result()["failed"]) == ["no_such_benchmark"]
    with get_client(sync_client=True) as client:
        flow_run = FlowRunFilter(id=FlowRunFilterId(any_=[state.state_details.flow_run_id]))
        runs = client.read_task_runs(flow_run_filter=flow_run)
    assert [r.run_count for r in runs] == [3]  # the first try + 2 retries
