"""The sweep's `runner:` section without a cluster: validation with the field and the fix named, the
per-cell resource request as prefect-ray sees it, what the workers' environment gets, and the placement
recorded by a cell that is not in a Ray worker. (The cluster itself: tests/flows/test_sweep_ray.py.)"""

from __future__ import annotations

import pytest

from envace.config import ConfigError
from envace.sweeps.grid import SweepConfig
from envace.sweeps.ray_runner import RunnerConfig, RunnerKind, cell_resources, placement, use_token_auth, worker_env


def test_default_runner_is_the_local_pool():
    cfg = SweepConfig(name="s", out_dir="/tmp/s")
    assert cfg.runner.kind is RunnerKind.LOCAL and cfg.runner.address is None


def test_ray_runner_from_yaml_fields():
    cfg = SweepConfig(name="s", out_dir="/tmp/s", runner={"kind": "ray", "address": "10.0.0.1:6379",
                                                          "num_cpus": 2, "num_gpus": 0.5})
    assert cfg.runner.kind is RunnerKind.RAY and cfg.runner.resolved_address() == "10.0.0.1:6379"
    assert cfg.runner.remote_options() == {"num_cpus": 2.0, "num_gpus": 0.5}


def test_an_address_on_a_local_runner_is_refused():
    with pytest.raises(ValueError, match="runner.kind is local"):
        RunnerConfig(kind="local", address="10.0.0.1:6379")


@pytest.mark.parametrize("field, value", [("num_cpus", 0), ("num_gpus", -1)])
def test_resource_requests_must_be_possible(field, value):
    with pytest.raises(ValueError, match=field):
        RunnerConfig(kind="ray", **{field: value})


def test_a_ray_runner_without_a_cluster_names_the_fix(monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    with pytest.raises(ConfigError, match="set runner.address .* or export RAY_ADDRESS"):
        RunnerConfig(kind="ray").resolved_address()
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.2:6379")
    assert RunnerConfig(kind="ray").resolved_address() == "10.0.0.2:6379"


def test_cell_resources_set_prefect_rays_remote_options_only_for_ray():
    from prefect_ray.context import RemoteOptionsContext

    with cell_resources(RunnerConfig(kind="ray", address="h:1", num_cpus=3, num_gpus=1)):
        assert RemoteOptionsContext.get().current_remote_options == {"num_cpus": 3.0, "num_gpus": 1.0}
    assert RemoteOptionsContext.get().current_remote_options == {}
    with cell_resources(RunnerConfig()):
        assert RemoteOptionsContext.get().current_remote_options == {}


def test_worker_env_forwards_only_the_named_variables_and_the_extra_ones():
    environ = {"HF_HUB_OFFLINE": "1", "MLFLOW_TRACKING_URI": "http://m:5000", "SECRET_TOKEN": "x", "HOME": "/root"}
    env = worker_env(RunnerConfig(kind="ray", address="h:1", env={"FOO": "bar"}), environ)
    assert env == {"HF_HUB_OFFLINE": "1", "MLFLOW_TRACKING_URI": "http://m:5000", "FOO": "bar"}


def test_a_missing_token_file_is_named(tmp_path):
    with pytest.raises(ConfigError, match="runner.auth_token_path .*nope does not exist"):
        use_token_auth(str(tmp_path / "nope"))


def test_a_cell_outside_ray_records_a_local_placement():
    assert placement() == {"runner": "local"}


def test_token_auth_is_put_back_after_the_sweep(tmp_path, monkeypatch):
    from envace.sweeps.ray_runner import restore_auth

    monkeypatch.delenv("RAY_AUTH_MODE", raising=False)
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", "/elsewhere/token")
    token = tmp_path / "token"
    token.write_text("t" * 64)
    before = use_token_auth(str(token))
    import os

    assert os.environ["RAY_AUTH_MODE"] == "token" and os.environ["RAY_AUTH_TOKEN_PATH"] == str(token)
    restore_auth(before)
    assert "RAY_AUTH_MODE" not in os.environ and os.environ["RAY_AUTH_TOKEN_PATH"] == "/elsewhere/token"
