"""Where tasks come from: the built-in tool world (generated, seeded), CM2 annotated JSON, or verl
parquet rows. One function so every entry point (SFT, train, eval, flows) reads data the same way."""

from __future__ import annotations

from envace.data.config import DataConfig
from envace.types import Task


def load_tasks(cfg: DataConfig, *, split: str | None = None, n: int | None = None,
               seed: int | None = None) -> list[Task]:
    if cfg.source == "world":
        from envace.worlds.generator import generate_tasks

        return generate_tasks(n or cfg.n_tasks, split or cfg.split, cfg.seed if seed is None else seed,
                              domains=cfg.domains)
    if cfg.source == "cm2":
        from envace.data.cm2 import load_cm2

        tasks = load_cm2(cfg.path)
    else:
        from envace.data.verl_parquet import read_verl_parquet

        tasks = read_verl_parquet(cfg.path)
    return tasks[:n] if n else tasks
