"""Sweep specs: a grid of config overrides × seeds, expanded into cells.

A sweep YAML (`SweepConfig`) names a base cell config (a `TrainConfig` YAML for `kind: train`, an
`EvalConfig` YAML or none for `kind: eval`), overrides shared by every cell, and `axes`. Each axis is
either a mapping `level name -> [key=value, ...]` (named variants, e.g. `envace: []`,
`grpo_env: [rollout.mode=env]`) or a list of scalars, in which case the axis name is the config key
(`tts.n: [0, 1, 2]` gives the levels `tts.n=0`, ...). Cells are the Cartesian product of the axes (minus
`exclude`d combinations) × `seeds`. A cell is fully described by a `CellSpec`, which is what a Prefect
task receives: it can be run, cached and retried on its own.

With a `worldbench:` section every cell (base rows included) also scores its world model on worldbench and
the sweep writes the task-gain vs world-model-gain table (envace.sweeps.world_model).

Override order inside a cell: sweep `overrides`, then the cell's level overrides (in axis order), then
the seed (`seed=S` for training, `seeds=[S]` for evaluation), so the seed list always wins. Relative
paths (`base`, `out_dir`, model dirs) are relative to the directory the sweep is started from (the
repository root), like every other envace command.
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, model_validator

from envace.config import BaseConfig, ConfigError
from envace.sweeps.prepare import SFTSpec
from envace.sweeps.ray_runner import RunnerConfig
from envace.sweeps.world_model import WorldbenchSpec
from envace.tracking.locations import Kind, RunLocations, locations
from envace.tts.config import DEFAULT_N_GRID, TTS_MODES

Scalar = str | int | float | bool
DEFAULT_PASS = "default"  # the name of the main evaluation pass (eval_overrides) beside extra_evals
_SLUG_BAD = re.compile(r"[^A-Za-z0-9._-]+")
_SFT_REF = re.compile(r"\{sft:([A-Za-z0-9_.-]+)\}")


def resolve_sft_refs(text: str, sft: dict[str, SFTSpec]) -> str:
    """`model={sft:small}` -> `model=<sft.small.out>/model`."""
    return _SFT_REF.sub(lambda m: str(sft[m.group(1)].model_dir()), text)


def fmt_value(v: Scalar) -> str:
    """A scalar as it is written in a `key=value` override (YAML spelling for booleans)."""
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def slugify(text: str) -> str:
    """A directory- and Prefect-key-safe form of a cell or sweep name."""
    return _SLUG_BAD.sub("-", text.replace("=", "-").replace(",", "_")).strip("-_") or "cell"


class SweepConfig(BaseConfig):
    """`envace sweep run CONFIG`: an ablation / TTS sweep over a grid of overrides × seeds."""

    name: str = Field(..., min_length=1, description="Sweep name: the MLflow parent run's name.")
    kind: Literal["train", "eval"] = Field(
        "train", description="Cell type: train (TrainConfig, then an optional evaluation) or eval (EvalConfig).")
    base: str | None = Field(None, description="Base YAML of every cell's config (TrainConfig / EvalConfig).")
    overrides: list[str] = Field(default_factory=list, description="key=value overrides applied to every cell.")
    axes: dict[str, dict[str, list[str] | str] | list[Scalar]] = Field(
        default_factory=dict, description="Grid axes: {axis: {level: [key=value, ...]}} or {config.key: [values]}.")
    exclude: list[dict[str, Scalar | list[int]]] = Field(
        default_factory=list, description="Level combinations to skip, e.g. {tts.n: 0, tts.mode: sequential}; with "
                                          "`seeds: [3, 4]` only for those seeds (a probe arm run on fewer seeds).")
    seeds: list[int] = Field(default_factory=lambda: [0], min_length=1, description="Seeds; one cell per seed.")
    eval_overrides: list[str] | None = Field(
        None, description="kind=train: evaluate each final checkpoint with these EvalConfig overrides (None: no eval).")
    metrics: list[str] | None = Field(None, description="Metrics of the results table (None: chosen by kind).")
    out_dir: str = Field(..., description="Sweep directory: cells/, results, Prefect result cache.")
    mlflow_uri: str | None = Field(None, description="MLflow tracking URI or directory (None: <out_dir>/mlflow).")
    experiment: str = Field("envace-sweeps", description="MLflow experiment of the parent and child runs.")
    store_url: str | None = Field(None, description="Trajectory store shared by the cells (None: <out_dir>/store.db).")
    max_workers: int = Field(1, ge=1, description="Cells run at once (one process each when > 1).")
    task_runner: Literal["auto", "threads", "processes"] = Field(
        "auto", description="auto: processes when max_workers > 1 (model loading is not thread-safe), else threads.")
    runner: RunnerConfig = Field(
        default_factory=RunnerConfig, description="Where cells run: local (max_workers / task_runner on this "
                                                  "machine) or {kind: ray, address, num_cpus, num_gpus} per cell.")
    retries: int = Field(2, ge=0, description="Retries of a cell whose config calls an endpoint (an http(s) URL).")
    retry_backoff_s: float = Field(10.0, ge=0, description="Exponential backoff factor of those retries (s).")
    cache: bool = Field(True, description="Skip cells whose config, input data and code are unchanged.")
    artifact_dir: str = Field("sweep", description="MLflow artifact folder of the results (sweep/, tts/).")
    sft: dict[str, SFTSpec] = Field(
        default_factory=dict, description="SFT checkpoints built (or reused, cached) before the cells; overrides "
                                          "name one's model as {sft:NAME} (envace.sweeps.prepare).")
    baselines: dict[str, str] = Field(
        default_factory=dict, description="Base (no RL) rows: {level name: sft name}; each is an evaluation cell "
                                          "per seed of that SFT model with eval_overrides, on the first axis.")
    sft_seeds: list[int] | None = Field(
        None, description="SFT starts as the top replication level: every `sft:` checkpoint is built once per seed "
                          "(<out>/seed_S) and every cell and base row runs from each start (None: one start, each "
                          "spec's own seed). Each extra start costs its SFT builds plus every cell again.")
    extra_evals: dict[str, list[str]] = Field(
        default_factory=dict, description="Further evaluation passes of every trained cell and base row: {name: "
                                          "[EvalConfig overrides applied after eval_overrides]}, e.g. {t1_k4: "
                                          "[rollout.act.temperature=1.0, k=4]}; metrics eval_<name>/...")
    contrasts: list[tuple[str, str]] = Field(
        default_factory=list, description="Extra paired comparisons [arm, comparator] of the report (levels of the "
                                          "first axis or full grid points), beside vs-base and vs-reference.")
    worldbench: WorldbenchSpec | None = Field(
        None, description="Also score every cell's world model on worldbench and write the task-gain vs "
                          "world-model-gain table (envace.sweeps.world_model); None: no worldbench.")

    @model_validator(mode="after")
    def _check(self) -> SweepConfig:
        for item in self.overrides + (self.eval_overrides or []):
            if "=" not in item:
                raise ConfigError(f"sweep {self.name!r}: override {item!r} is not key=value; write e.g. steps=10")
        if len(set(self.seeds)) != len(self.seeds):
            raise ConfigError(f"sweep {self.name!r}: seeds {self.seeds} repeat a value; list each seed once")
        for axis, spec in self.axes.items():
            if not spec:
                raise ConfigError(f"sweep {self.name!r}: axis {axis!r} has no levels; give at least one")
            for level, ov in axis_levels(axis, spec):
                for item in ov:
                    if "=" not in item:
                        raise ConfigError(f"sweep {self.name!r}: axis {axis!r} level {level!r}: override {item!r} "
                                          f"is not key=value")
        wb_score = self.worldbench.score if self.worldbench else []
        for text in [*self.overrides, *(self.eval_overrides or []), *wb_score,
                     *(ov for a, spec in self.axes.items() for _, ovs in axis_levels(a, spec) for ov in ovs)]:
            for name in _SFT_REF.findall(text):
                if name not in self.sft:
                    raise ConfigError(f"sweep {self.name!r}: {text!r} names {{sft:{name}}}, but `sft:` defines "
                                      f"{sorted(self.sft) or 'no checkpoints'}; add it under sft:")
        for level, name in self.baselines.items():
            if name not in self.sft:
                raise ConfigError(f"sweep {self.name!r}: baselines.{level} names SFT checkpoint {name!r}; `sft:` "
                                  f"defines {sorted(self.sft) or 'none'}")
            if self.eval_overrides is None:
                raise ConfigError(f"sweep {self.name!r}: baselines need eval_overrides (how to evaluate them)")
            if not self.axes:
                raise ConfigError(f"sweep {self.name!r}: baselines are rows of the first axis; add an axis")
        if self.sft_seeds is not None and (not self.sft_seeds or len(set(self.sft_seeds)) != len(self.sft_seeds)):
            raise ConfigError(f"sweep {self.name!r}: sft_seeds {self.sft_seeds} must list at least one seed, each once")
        if self.sft_seeds is not None and not self.sft:
            raise ConfigError(f"sweep {self.name!r}: sft_seeds is set but `sft:` names no checkpoint to build")
        for name, ov in self.extra_evals.items():
            if self.eval_overrides is None:
                raise ConfigError(f"sweep {self.name!r}: extra_evals.{name} needs eval_overrides (the main pass)")
            if name == DEFAULT_PASS or slugify(name) != name:
                raise ConfigError(f"sweep {self.name!r}: extra_evals name {name!r} must be a plain slug other than "
                                  f"{DEFAULT_PASS!r}, e.g. t1_k4")
            for item in ov:
                if "=" not in item:
                    raise ConfigError(f"sweep {self.name!r}: extra_evals.{name}: override {item!r} is not key=value")
        for pair in self.contrasts:
            for name in pair:
                if name not in self.group_names():
                    raise ConfigError(f"sweep {self.name!r}: contrast {list(pair)} names {name!r}, which is no grid "
                                      f"point; use one of {self.group_names()}")
        for combo in self.exclude:
            if "seeds" in combo and not (isinstance(combo["seeds"], list) and len(combo) > 1):
                raise ConfigError(f"sweep {self.name!r}: exclude {combo}: `seeds` is a list of seeds beside at least "
                                  "one axis level, e.g. {variant: probe, seeds: [3, 4]}")
            for axis, level in combo.items():
                if axis == "seeds":
                    continue
                if axis not in self.axes:
                    raise ConfigError(f"sweep {self.name!r}: exclude names axis {axis!r}, which is not one of "
                                      f"{sorted(self.axes)}")
                names = [n for n, _ in axis_levels(axis, self.axes[axis])]
                if fmt_value(level) not in names:
                    raise ConfigError(f"sweep {self.name!r}: exclude names level {level!r} of axis {axis!r}; "
                                      f"its levels are {names}")
        return self

    def group_names(self) -> list[str]:
        """Every grid point's name as `expand_cells` writes it (`axis=level,...`), with the first axis's bare level
        names as aliases of theirs (a one-axis sweep's contrasts read `[per_role, grpo_env]`)."""
        first = next(iter(self.axes), None)
        names = [n for n, _ in axis_levels(first, self.axes[first])] if first else []
        return [*names, *self.baselines, *(self.group_of(n) for n in names)]

    def group_of(self, name: str) -> str:
        """A contrast's name as a grid point (`per_role` -> `variant=per_role` on a one-axis sweep)."""
        if "=" in name or len(self.axes) != 1:
            return name
        return f"{next(iter(self.axes))}={name}"

    def contrast_groups(self) -> list[tuple[str, str]]:
        return [(self.group_of(a), self.group_of(b)) for a, b in self.contrasts]

    def sft_starts(self) -> list[int | None]:
        """The SFT starts every cell runs from (None: the single start of the specs' own seeds)."""
        return list(self.sft_seeds) if self.sft_seeds is not None else [None]

    def sft_for(self, start: int | None) -> dict[str, SFTSpec]:
        """The `sft:` specs of one start: with `sft_seeds`, seed S and <out>/seed_S."""
        if start is None:
            return dict(self.sft)
        return {n: s.model_copy(update={"seed": start, "out": str(Path(s.out) / f"seed_{start}")})
                for n, s in self.sft.items()}

    def sft_builds(self) -> dict[str, SFTSpec]:
        """Every SFT checkpoint to build before the cells: `name` (one start) or `name@S` per start."""
        if self.sft_seeds is None:
            return dict(self.sft)
        return {f"{n}@{start}": s for start in self.sft_seeds for n, s in self.sft_for(start).items()}

    def default_metrics(self) -> list[str]:
        if self.metrics:
            return list(self.metrics)
        if self.kind == "eval":
            return ["eval/world/success", "eval/world/reward"]
        if self.eval_overrides is not None:
            return ["eval/world/success", "eval/world/reward", "train/reward_last"]
        return ["train/reward_last"]

    def locations(self) -> RunLocations:
        """The sweep's MLflow database and store (envace.tracking.locations: `<out_dir>/mlflow/`,
        `<out_dir>/store.db`, unless `mlflow_uri` / `store_url` name them)."""
        return locations(self.out_dir, Kind.SWEEP, mlflow_uri=self.mlflow_uri, store_url=self.store_url)

    def resolved_mlflow_uri(self) -> str:
        return self.locations().mlflow_uri

    def resolved_store_url(self) -> str:
        return self.locations().store_url


def axis_levels(axis: str, spec: dict[str, list[str] | str] | list[Scalar]) -> list[tuple[str, list[str]]]:
    """[(level name, overrides)] of one axis, in the order written."""
    if isinstance(spec, dict):
        return [(str(name), [ov] if isinstance(ov, str) else list(ov)) for name, ov in spec.items()]
    return [(fmt_value(v), [f"{axis}={fmt_value(v)}"]) for v in spec]


class CellSpec(BaseConfig):
    """Everything one cell needs to run on its own (the parameter of the Prefect cell task)."""

    name: str = Field(..., description="Cell name: 'axis=level,...,seed=S'.")
    group: str = Field(..., description="Grid point without the seed (the results table's row).")
    levels: dict[str, str] = Field(default_factory=dict, description="Level of each axis.")
    seed: int = Field(0, description="Seed of this cell.")
    kind: Literal["train", "eval"] = Field("train", description="Cell type.")
    base: str | None = Field(None, description="Base YAML of the cell config.")
    overrides: list[str] = Field(default_factory=list, description="Sweep + level overrides (seed excluded).")
    eval_overrides: list[str] | None = Field(None, description="kind=train: evaluation after training.")
    out_dir: str = Field(..., description="The cell's own directory.")
    mlflow_uri: str = Field(..., description="MLflow tracking URI or directory (shared with the parent).")
    experiment: str = Field("envace-sweeps", description="MLflow experiment.")
    store_url: str | None = Field(None, description="Trajectory store.")
    parent_run_id: str | None = Field(None, description="The sweep's MLflow parent run.")
    sft_seed: int | None = Field(None, description="The SFT start this cell runs from (None: the single start).")
    extra_evals: dict[str, list[str]] = Field(default_factory=dict,
                                              description="Further evaluation passes {name: overrides} (SweepConfig).")
    worldbench_data: str | None = Field(None, description="Worldbench data dir to score the cell's world model on "
                                                          "(None: no worldbench scoring).")
    worldbench_score: list[str] = Field(default_factory=list, description="ScoreConfig overrides of that scoring.")

    def locations(self) -> RunLocations:
        """The cell's records: the sweep's MLflow database and store, the cell's own folder."""
        return locations(self.out_dir, Kind.SWEEP, mlflow_uri=self.mlflow_uri, store_url=self.store_url)

    def seed_override(self) -> str:
        return f"seed={self.seed}" if self.kind == "train" else f"seeds=[{self.seed}]"

    def all_overrides(self) -> list[str]:
        return [*self.overrides, self.seed_override()]


def expand_cells(cfg: SweepConfig, parent_run_id: str | None = None) -> list[CellSpec]:
    """The sweep's cells: (SFT starts ×) (base rows + product of the axes minus excludes) × seeds, in a stable
    order: start-major, then as written."""
    axes = [(axis, axis_levels(axis, spec)) for axis, spec in cfg.axes.items()]
    excluded = [({a: fmt_value(v) for a, v in combo.items() if a != "seeds"}, combo.get("seeds"))
                for combo in cfg.exclude]
    out_root = Path(cfg.out_dir) / "cells"
    cells: list[CellSpec] = []
    seen: dict[str, str] = {}
    wb = {"worldbench_data": str(cfg.worldbench.data_dir(cfg.out_dir))} if cfg.worldbench is not None else {}
    first_axis = next(iter(cfg.axes), None)

    def add(name: str, **fields: Any) -> None:
        slug = slugify(name)
        if slug in seen:
            raise ConfigError(f"sweep {cfg.name!r}: cells {seen[slug]!r} and {name!r} map to the same directory "
                              f"{slug!r}; rename a level")
        seen[slug] = name
        cells.append(CellSpec(name=name, out_dir=str(out_root / slug), mlflow_uri=cfg.resolved_mlflow_uri(),
                              experiment=cfg.experiment, store_url=cfg.resolved_store_url(),
                              parent_run_id=parent_run_id, extra_evals=dict(cfg.extra_evals), **wb, **fields))

    for start in cfg.sft_starts():
        sft = cfg.sft_for(start)
        tag = "" if start is None else f"sft_seed={start},"

        def refs(items: list[str] | None, sft: dict[str, SFTSpec] = sft) -> list[str] | None:
            return None if items is None else [resolve_sft_refs(x, sft) for x in items]

        if cfg.worldbench is not None:  # e.g. act_checkpoint={sft:default}: BehR's frozen Act is the start model
            wb["worldbench_score"] = refs(cfg.worldbench.score)

        for level, name in cfg.baselines.items():  # base (no RL) rows: evaluate the SFT model itself
            levels = {a: (level if a == first_axis else "-") for a in cfg.axes}
            group = ",".join(f"{a}={lv}" for a, lv in levels.items())
            for seed in cfg.seeds:
                add(f"{group},{tag}seed={seed}", group=group, levels=levels, seed=seed, sft_seed=start, kind="eval",
                    base=None, overrides=[*refs(cfg.eval_overrides), f"model={sft[name].model_dir()}"],
                    eval_overrides=None)
        for combo in itertools.product(*[levels for _, levels in axes]):
            levels = {axis: level for (axis, _), (level, _) in zip(axes, combo)}
            matching = [seeds for ex, seeds in excluded if all(levels.get(a) == lv for a, lv in ex.items())]
            if any(seeds is None for seeds in matching):
                continue
            skipped = {s for seeds in matching for s in seeds}
            level_overrides = [ov for _, ovs in combo for ov in ovs]
            group = ",".join(f"{a}={lv}" for a, lv in levels.items())
            for seed in (s for s in cfg.seeds if s not in skipped):
                add(f"{group},{tag}seed={seed}" if group else f"{tag}seed={seed}", group=group or "all",
                    levels=levels, seed=seed, sft_seed=start, kind=cfg.kind, base=cfg.base,
                    overrides=refs([*cfg.overrides, *level_overrides]), eval_overrides=refs(cfg.eval_overrides))
    if not cells:
        raise ConfigError(f"sweep {cfg.name!r}: every combination is excluded; remove an exclude entry")
    return cells


def tts_sweep_config(model: str | list[str], out_dir: str, *, n_values: list[int] = DEFAULT_N_GRID,
                     modes: list[str] = TTS_MODES, memories: list[str] | None = None, seeds: list[int] = (0,),
                     eval_overrides: list[str] = (), name: str = "tts", **fields: Any) -> SweepConfig:
    """A TTS sweep: (model ×) N × mode (× memory strategy) evaluation cells. N counts private rehearsals;
    N=0 is the plain run, so it is run once (as the first mode and memory) instead of once per mode and
    memory. A list of models (e.g. the SFT checkpoint and the RL one: base vs trained) becomes a `model`
    axis; `memories` (None: no axis, the default prose memory) a `tts.memory` axis."""
    axes: dict[str, list[Any]] = {"tts.n": list(n_values), "tts.mode": list(modes)}
    if memories is not None:
        axes["tts.memory"] = list(memories)
    exclude = ([{"tts.n": 0, axis: level} for axis in axes if axis != "tts.n" for level in axes[axis][1:]]
               if 0 in n_values else [])
    overrides = list(eval_overrides)
    if isinstance(model, str):
        overrides.insert(0, f"model={model}")
    else:
        axes = {"model": list(model), **axes}
    return SweepConfig(name=name, kind="eval", overrides=overrides, axes=axes, exclude=exclude,
                       seeds=list(seeds), out_dir=out_dir, artifact_dir="tts", **fields)
