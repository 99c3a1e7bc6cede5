"""Scheduling: a cron deployment registered on a real Prefect server (the test harness), the server-less
cron loop, and prefect.yaml's deployments pointing at real flows, valid crons and existing configs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from envace.sweeps.schedule import validate_cron

pytestmark = pytest.mark.flows

# a valid config whose cell fails when it runs: its frozen simulator's model dir does not exist
MISSING_SIMULATOR = ["rollout.mode=simulator", "rollout.simulator_model=/nonexistent/simulator"]
REPO = Path(__file__).resolve().parents[2]


def test_sweep_deployment_registers_its_cron_schedule(prefect_harness, write_sweep, tmp_path):
    from prefect.client.orchestration import get_client

    from envace_flows.sweep import sweep_deployment

    path = write_sweep(tmp_path, "nightly", {"variant": {"envace": []}})
    deployment = sweep_deployment(path, "0 3 * * *", timezone="Europe/Paris")
    deployment_id = deployment.apply()
    with get_client(sync_client=True) as client:
        stored = client.read_deployment(deployment_id)
    assert stored.name == "nightly-cron"
    assert stored.parameters == {"config": str(path.resolve()), "overrides": []}
    [sched] = stored.schedules
    assert sched.schedule.cron == "0 3 * * *" and sched.schedule.timezone == "Europe/Paris" and sched.active


def test_without_a_server_the_loop_waits_for_the_cron_time_and_runs_the_sweep(prefect_harness, write_sweep,
                                                                               tmp_path, monkeypatch):
    import envace_flows.sweep as sweep_mod

    # every cell fails at once (its simulator model dir does not exist), so the scheduled run is quick; it
    # still runs the real flow
    path = write_sweep(tmp_path, "loop", {"variant": {"bad": MISSING_SIMULATOR}})
    monkeypatch.setattr(sweep_mod, "prefect_api_url", lambda: None)
    slept: list[float] = []
    sweep_mod.schedule_sweep(path, "* * * * *", max_runs=1, sleep=slept.append)
    assert len(slept) == 1 and 0.0 <= slept[0] <= 60.0  # the next minute boundary
    summary = json.loads((tmp_path / "sweep" / "results" / "summary.json").read_text())
    assert list(summary["failed"]) == ["variant=bad,seed=0"]


def test_prefect_yaml_deployments_are_runnable(monkeypatch):
    from prefect.flows import Flow, load_flow_from_entrypoint

    monkeypatch.chdir(REPO)  # `prefect deploy` runs from the repository root and loads each entrypoint by path
    spec = yaml.safe_load((REPO / "prefect.yaml").read_text())
    assert spec["deployments"]
    for dep in spec["deployments"]:
        fl = load_flow_from_entrypoint(dep["entrypoint"], use_placeholder_flow=False)  # an import error raises
        assert isinstance(fl, Flow), dep["name"]
        fl.validate_parameters(dep.get("parameters", {}))  # names and types match the flow signature
        for sched in dep.get("schedules") or []:
            validate_cron(sched["cron"], sched.get("timezone", "UTC"))
        config = dep.get("parameters", {}).get("config")
        if config:
            assert (REPO / config).is_file(), f"{dep['name']}: {config} does not exist"
