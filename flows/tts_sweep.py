"""The test-time-rehearsal sweep flow: checkpoints (e.g. base = SFT only and trained = after RL) evaluated
on the tool world for every N ∈ n_values × mode ∈ modes (× memory strategy ∈ memories) × seed; N counts
private rehearsals and N=0 (the plain run) is run once per model rather than per mode and memory. One
evaluation per cell (`EvalConfig.tts`: `tts.n`, `tts.mode`, `tts.memory`), one MLflow child run per cell
under a parent run, the long table `tts/results.csv` (mean ± 95 % CI over seeds) and the TTS report
`tts/tts_table.{csv,md}` + `tts/tts_plot.html` (score vs N per model, mode and memory;
envace.sweeps.tts_report). configs/sweeps/tts.yaml runs the same cells through `envace sweep run`.
"""

from __future__ import annotations

from typing import Any

from prefect import flow

from envace.sweeps.grid import tts_sweep_config
from envace.tts.config import DEFAULT_N_GRID, TTS_MODES
from envace_flows.common import execute_sweep


@flow(name="tts-sweep")
def tts_sweep(model: str | list[str], out_dir: str, n_values: list[int] | None = None,
              modes: list[str] | None = None, memories: list[str] | None = None,
              seeds: list[int] = [0, 1, 2],  # noqa: B006 - Prefect parameters
              eval_overrides: list[str] | None = None, mlflow_uri: str | None = None,
              experiment: str = "envace-tts", max_workers: int = 1, name: str = "tts") -> dict[str, Any]:
    """Evaluate `model` (one path, or a list: a `model` axis) with test-time rehearsal over N × mode (× memory
    strategy) × seeds. n_values: default envace.tts.config.DEFAULT_N_GRID; modes: both; memories: None, the
    default prose memory only (no axis)."""
    cfg = tts_sweep_config(model, out_dir, n_values=list(n_values or DEFAULT_N_GRID),
                           modes=list(modes or TTS_MODES), memories=memories, seeds=seeds,
                           eval_overrides=eval_overrides or [], name=name, mlflow_uri=mlflow_uri,
                           experiment=experiment, max_workers=max_workers)
    return execute_sweep(cfg)
