"""The test-time-rehearsal sweep flow: checkpoints (e.g. base = SFT only and trained = after RL) evaluated
on the tool world for every N ∈ n_values × mode ∈ modes × seed; N counts private rehearsals and N=0 (the
plain run) is run once per model rather than per mode. One evaluation per cell (`EvalConfig.tts_n` /
`tts_mode`), one MLflow child run per cell under a parent run, the long table `tts/results.csv` (mean ±
95 % CI over seeds) and the TTS report `tts/tts_table.{csv,md}` + `tts/tts_plot.html` (score vs N per
model and mode; envace.sweeps.tts_report). configs/sweeps/tts.yaml runs the same cells through
`envace sweep run`.
"""

from __future__ import annotations

from typing import Any

from prefect import flow

from envace.sweeps.grid import tts_sweep_config
from flows.common import execute_sweep


@flow(name="tts-sweep")
def tts_sweep(model: str | list[str], out_dir: str, n_values: list[int] = [0, 1, 2, 3],  # noqa: B006 - Prefect parameters
              modes: list[str] = ["parallel", "sequential"], seeds: list[int] = [0, 1, 2],  # noqa: B006
              eval_overrides: list[str] | None = None, mlflow_uri: str | None = None,
              experiment: str = "envace-tts", max_workers: int = 1, name: str = "tts") -> dict[str, Any]:
    """Evaluate `model` (one path, or a list: a `model` axis) with test-time rehearsal over N × mode × seeds."""
    cfg = tts_sweep_config(model, out_dir, n_values=n_values, modes=modes, seeds=seeds,
                           eval_overrides=eval_overrides or [], name=name, mlflow_uri=mlflow_uri,
                           experiment=experiment, max_workers=max_workers)
    return execute_sweep(cfg)
