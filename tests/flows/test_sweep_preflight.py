"""A sweep is checked before its first cell runs: a misspelled override in its second arm is one ConfigError
naming that cell, and the first arm never trained (no execution record, no MLflow run). The real flow runs
against Prefect's test server."""

from __future__ import annotations

import pytest

from envace.config import ConfigError
from envace.sweeps.cells import executions

pytestmark = pytest.mark.flows


def test_a_bad_override_in_the_second_arm_stops_the_sweep_before_the_first_trains(prefect_harness, write_sweep,
                                                                                  tmp_path):
    from mlflow.tracking import MlflowClient

    from envace_flows.sweep import run_sweep_from_file

    axes = {"variant": {"envace": [], "kl_on": ["algo.use_kll=true"]}}
    path = write_sweep(tmp_path, "typo", axes)
    with pytest.raises(ConfigError) as err:
        run_sweep_from_file(path)
    msg = str(err.value)
    assert "cell 'variant=kl_on,seed=0'" in msg and "algo.use_kll" in msg and "nothing has run" in msg, msg
    assert executions(tmp_path / "sweep" / "cells" / "variant-envace_seed-0") == []
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    assert [r for e in client.search_experiments() for r in client.search_runs([e.experiment_id])] == []
