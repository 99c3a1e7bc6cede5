"""The ablation sweep flow: any grid of config overrides × seeds from a sweep YAML (`SweepConfig`),
one MLflow parent run with a child run per cell, a mean ± 95 % CI table and a plot as artifacts
(`sweep/results.csv`, `sweep/results.html`). See flows/common.py for caching, retries, concurrency.

    envace sweep run configs/sweeps/paper_ablations.yaml
"""

from __future__ import annotations

from typing import Any

from prefect import flow

from envace.config import load_config
from envace.sweeps.grid import SweepConfig
from envace_flows.common import execute_sweep


@flow(name="ablation-sweep")
def ablation_sweep(config: str, overrides: list[str] | None = None) -> dict[str, Any]:
    """Run the sweep described by the YAML at `config` (with `key=value` overrides of the sweep config)."""
    return execute_sweep(load_config(SweepConfig, config, overrides or []))
