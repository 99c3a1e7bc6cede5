"""The test-time-rehearsal sweep flow: one checkpoint evaluated on the tool world for every
N ∈ n_values × mode ∈ modes × seed (N=1, i.e. no private rehearsal, once rather than per mode). One
evaluation per cell (`EvalConfig.tts_n` / `tts_mode`), one MLflow child run per cell under a parent
run, and the table as `tts/results.csv` + `tts/results.html`. A sweep YAML with `kind: eval` and
`artifact_dir: tts` (configs/sweeps/tts.yaml) runs the same cells through the ablation flow.
"""

from __future__ import annotations

from typing import Any

from prefect import flow

from envace.sweeps.grid import tts_sweep_config
from flows.common import execute_sweep


@flow(name="tts-sweep")
def tts_sweep(model: str, out_dir: str, n_values: list[int] = [1, 2, 3],  # noqa: B006 - Prefect parameters
              modes: list[str] = ["parallel", "sequential"], seeds: list[int] = [0],  # noqa: B006
              eval_overrides: list[str] | None = None, mlflow_uri: str | None = None,
              experiment: str = "envace-tts", max_workers: int = 1, name: str = "tts") -> dict[str, Any]:
    """Evaluate `model` with test-time rehearsal over N × mode × seeds."""
    cfg = tts_sweep_config(model, out_dir, n_values=n_values, modes=modes, seeds=seeds,
                           eval_overrides=eval_overrides or [], name=name, mlflow_uri=mlflow_uri,
                           experiment=experiment, max_workers=max_workers)
    return execute_sweep(cfg)
