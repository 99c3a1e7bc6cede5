"""Sweeps: grids of config overrides × seeds (`grid`), running one cell (`cells`), cache keys
(`cache`), the results table with 95 % CIs and the MLflow parent run (`results`), cron times
(`schedule`). The Prefect flows in `flows/` call these; nothing here imports Prefect at module level."""

from envace.sweeps.grid import CellSpec, SweepConfig, expand_cells, slugify, tts_sweep_config

__all__ = ["CellSpec", "SweepConfig", "expand_cells", "slugify", "tts_sweep_config"]
