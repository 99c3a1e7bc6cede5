"""A two-cell sweep on a Ray cluster through prefect-ray's task runner: a real Ray head node that the test
starts on this machine (`ray start --head --block`, its own ports, temp dir and auth token) and stops,
the real embedded trainer in each cell at toy size. Checked as for the local pool: one MLflow parent
run with one child per cell, the results table, and on a second run both cells served from the cache
without running again; plus what only Ray gives: each cell ran in a Ray worker with its own resource
request (1 CPU, 0 GPU), on the head's node."""

from __future__ import annotations

import os

import pytest

pytestmark = [pytest.mark.flows, pytest.mark.timeout(1800)]


@pytest.fixture
def no_ray_driver():
    import ray

    assert not ray.is_initialized(), "another test left this process connected to Ray"
    yield
    if ray.is_initialized():
        ray.shutdown()


def test_two_cell_sweep_runs_on_a_local_ray_head(prefect_harness, ray_head, no_ray_driver, write_sweep, tmp_path):
    from envace.sweeps.cells import executions
    from envace.tracking.mlflow_run import child_runs
    from envace_flows.ablation import ablation_sweep

    axes = {"variant": {"envace": [], "grpo_env": ["rollout.mode=env", "algo.advantage=grpo"]}}
    runner = {"kind": "ray", "address": ray_head.address, "num_cpus": 1, "num_gpus": 0,
              "auth_token_path": str(ray_head.token_path)}
    path = write_sweep(tmp_path, "ray-two-cell", axes, runner=runner)

    first = ablation_sweep(str(path))
    names = ["variant=envace,seed=0", "variant=grpo_env,seed=0"]
    assert first["failed"] == {}, first["failed"]
    assert sorted(first["executed"]) == names and first["cached"] == []
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    children = child_runs(uri, first["parent_run_id"])
    assert sorted(first["child_runs"].values()) == children and len(children) == 2

    driver_pid = os.getpid()
    for spec_dir in sorted((tmp_path / "sweep" / "cells").iterdir()):
        events = executions(spec_dir)
        assert [e["event"] for e in events] == ["start", "end"] and events[1]["status"] == "ok"
        start = events[0]
        assert start["pid"] != driver_pid  # not the flow's process: a Ray worker
        assert start["placement"]["runner"] == "ray"
        assert start["placement"]["resources"] == {"CPU": 1.0}  # the cell's own request, no GPU
    nodes = {executions(d)[0]["placement"]["node_id"] for d in (tmp_path / "sweep" / "cells").iterdir()}
    assert len(nodes) == 1  # the one node of the head

    table = {(row["group"], row["metric"]) for row in first["table"]}
    assert ("variant=envace", "train/reward_last") in table and ("variant=grpo_env", "train/reward_last") in table

    second = ablation_sweep(str(path))
    assert sorted(second["cached"]) == names and second["executed"] == [] and second["failed"] == {}
    assert second["parent_run_id"] == first["parent_run_id"]  # resumed, the children stay under it
    assert second["child_runs"] == first["child_runs"]
    for spec_dir in (tmp_path / "sweep" / "cells").iterdir():
        assert len(executions(spec_dir)) == 2  # cached: no new start / end events
    assert child_runs(uri, first["parent_run_id"]) == children
