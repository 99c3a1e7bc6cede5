"""A sweep checked before any cell runs: its size, then every cell's full config.

- `cell_count`: the cells the grid expands to, computed from the axis sizes, the exclusions and the seeds
  without expanding it (exact: inclusion-exclusion over the exclusions, which are few; past 16 of them the
  count before exclusions stands in, an upper bound). Over envace.input_budget.SWEEP_CELLS it is refused:
  expanding a 10^6-cell grid alone takes most of a minute and gigabytes, and running it never ends.
- `preflight`: the count, then every cell expanded and its config resolved exactly as the cell will
  resolve it (TrainConfig / EvalConfig with the cell's overrides; for training cells the evaluation
  overrides as an EvalConfig, and the worldbench scoring overrides as a ScoreConfig), so a misspelled
  override in the last arm is reported before the first arm trains. One ConfigError names the cell, the
  problem and how many cells have one. Paths are not checked here (an SFT checkpoint or a worldbench data
  dir is built by the sweep itself, before the cells).
- `dry_run`: what `envace sweep run --dry-run` prints: the cells, each with its overrides and directory.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

from envace.config import ConfigError, load_config
from envace.input_budget import SWEEP_CELLS, BudgetError
from envace.sweeps.grid import CellSpec, SweepConfig, axis_levels, expand_cells, fmt_value

MAX_EXACT_EXCLUDES = 16  # inclusion-exclusion visits 2^n subsets


def cell_count(cfg: SweepConfig) -> int:
    """Cells of the sweep (grid minus exclusions, times seeds, plus the baselines' rows), not expanded."""
    sizes = {axis: len(axis_levels(axis, spec)) for axis, spec in cfg.axes.items()}
    grid = math.prod(sizes.values())
    excludes = [{a: fmt_value(v) for a, v in combo.items()} for combo in cfg.exclude]
    if len(excludes) <= MAX_EXACT_EXCLUDES:
        for r in range(1, len(excludes) + 1):
            for subset in itertools.combinations(excludes, r):
                fixed: dict[str, str] = {}
                if any(fixed.setdefault(a, v) != v for combo in subset for a, v in combo.items()):
                    continue  # two exclusions that fix one axis to different levels match nothing together
                grid += (-1) ** r * math.prod(n for a, n in sizes.items() if a not in fixed)
    return (grid + len(cfg.baselines)) * len(cfg.seeds)


def check_size(cfg: SweepConfig) -> int:
    """The cell count, or a ConfigError when it is over SWEEP_CELLS."""
    n = cell_count(cfg)
    try:
        SWEEP_CELLS.check(n, f"sweep {cfg.name!r}", "the grid (axes x seeds) is",
                          "use fewer axis levels or seeds, or split it into several sweeps")
    except BudgetError as exc:
        raise ConfigError(str(exc), field=exc.where, what=exc.what, fix=exc.fix) from None
    return n


def _cell_problem(spec: CellSpec) -> str | None:
    """Why this cell's configs do not validate, or None."""
    from envace.evaluation.config import EvalConfig
    from envace.sweeps.cells import resolve_cell_config

    try:
        resolve_cell_config(spec)
        if spec.kind == "train" and spec.eval_overrides is not None:  # evaluated from its final checkpoint
            load_config(EvalConfig, None, spec.eval_overrides, model=f"{spec.out_dir}/checkpoints/final",
                        seeds=[spec.seed], out_dir=f"{spec.out_dir}/eval")
        if spec.worldbench_data is not None:
            from envace.worldbench.config import ScoreConfig

            load_config(ScoreConfig, None, spec.worldbench_score, data=spec.worldbench_data,
                        out=f"{spec.out_dir}/worldbench", model={"model_dir": f"{spec.out_dir}/model"},
                        reference_rows=[], seed=0, tracking={"enabled": False})
    except (ConfigError, ValueError) as exc:
        what = getattr(exc, "what", None)
        field = getattr(exc, "field", None)
        text = what if what and (not field or what.startswith(field.rpartition(": ")[2])) else \
            f"{field}: {what}" if what else str(exc)
        return " ".join(text.split())
    return None


def preflight(cfg: SweepConfig) -> list[CellSpec]:
    """The sweep's cells, every one's configs validated (see the module docstring); raises ConfigError."""
    check_size(cfg)
    cells = expand_cells(cfg)
    bad = [(spec, problem) for spec in cells if (problem := _cell_problem(spec)) is not None]
    if bad:
        spec, problem = bad[0]
        more = f" ({len(bad) - 1} more of the {len(cells)} cells have a problem)" if len(bad) > 1 else ""
        raise ConfigError(f"sweep {cfg.name!r}: cell {spec.name!r}: {problem}{more}; fix that override in the "
                          "sweep file (nothing has run)", field=f"sweep {cfg.name!r}, cell {spec.name!r}",
                          what=f"{problem}{more}", fix="fix that override in the sweep file (nothing has run)")
    return cells


def dry_run(cfg: SweepConfig) -> dict[str, Any]:
    """What `envace sweep run --dry-run` prints: every cell (validated), nothing run."""
    cells = preflight(cfg)
    return {"sweep": cfg.name, "n_cells": len(cells), "out_dir": cfg.out_dir,
            "cells": [{"name": c.name, "kind": c.kind, "seed": c.seed, "base": c.base,
                       "overrides": c.all_overrides(), "eval_overrides": c.eval_overrides, "out_dir": c.out_dir}
                      for c in cells]}
