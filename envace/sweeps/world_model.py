"""World-model evaluation of sweep cells: every final checkpoint (and every base row's SFT model) scored on
worldbench beside its task evaluation, and the table of task gain vs world-model gain per arm.

A sweep with a `worldbench:` section (`WorldbenchSpec`):
- **data**: a `worldbench build` output dir given as `worldbench.data`, or the sweep's own build under
  `<out_dir>/worldbench/data` from `worldbench.build` (BuildConfig fields; default: the built-in world's
  transitions, which need nothing outside this repository; τ² / BFCL when their packages are installed),
  built once before the cells and reused while its key (the build config and the code version) holds;
- **per cell**: `envace worldbench score` of the cell's world model (a checkpoint's `policy/` model, a
  per-role checkpoint's `rehearse/` model, or the base row's SFT model) with `worldbench.score` overrides
  (ScoreConfig fields), no reference rows, seed 0 for every cell: the same transitions, greedy, so cells pair
  transition by transition. Metrics `worldbench/<source>/<metric>` and `worldbench/all/<metric>` join the
  cell's metrics; the scores file path is kept in the cell record (`worldbench_file`);
- **table** (`world_model_report`, written as results/world_models.csv and .md): per trained arm, against
  the base row of the model it started from, seeds pooled: the task gain (success and reward, the paired
  per-task bootstrap of envace.sweeps.paired_report) and the world-model gain per worldbench source (leaf F1
  and exact match: per transition, the mean over the arm's seeds minus the mean over the base's, then the
  percentile bootstrap over transitions of worldbench's own scorer, envace.worldbench.score.paired_gain);
- **tracking** (`gain_tracking`, the table's last line): does a better world model go with a better task
  score? One point per trained cell: its task success minus its base row's (same seed), and its mean leaf
  F1 over all scored transitions minus the base's; Spearman's rank correlation over the points with a
  percentile bootstrap over cells (cells of one arm share a recipe, so the interval is optimistic; it
  says whether the sign is settled, not more).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import Field

from envace.config import BaseConfig

if TYPE_CHECKING:  # numpy / pandas load with the report, not with every sweep config
    import numpy as np
    import pandas as pd

KEY_FILE = "worldbench_key"
GAIN_METRICS = ("leaf_f1", "exact")
TASK_METRICS = ("success", "reward")
COLUMNS = ["arm", "base", "seeds", "source", "tasks", "transitions",
           *[f"task_{m}{s}" for m in TASK_METRICS for s in ("_gain", "_lo", "_hi")],
           *[f"wm_{m}{s}" for m in GAIN_METRICS for s in ("_gain", "_lo", "_hi")]]


class WorldbenchSpec(BaseConfig):
    """`worldbench:` of a sweep: score every cell's world model on worldbench (module docstring)."""

    data: str | None = Field(None, description="A `worldbench build` output dir to use as is (None: the sweep builds "
                                               "one under <out_dir>/worldbench/data from `build`).")
    build: dict[str, Any] = Field(default_factory=lambda: {"sources": ["world"]},
                                  description="BuildConfig fields of the sweep's own build (default: the built-in "
                                              "world's transitions; add tau2 / bfcl where their packages are "
                                              "installed).")
    score: list[str] = Field(default_factory=list, description="ScoreConfig key=value overrides of every cell's "
                                                               "scoring (e.g. limit=200 max_new_tokens=96).")
    n_boot: int = Field(10_000, ge=100, description="Bootstrap resamples of the table's intervals.")

    def data_dir(self, sweep_out: str | Path) -> Path:
        return Path(self.data) if self.data else Path(sweep_out) / "worldbench" / "data"


def _build_config(spec: WorldbenchSpec, sweep_out: str | Path):
    from envace.worldbench.config import BuildConfig

    return BuildConfig.model_validate({**spec.build, "out": str(spec.data_dir(sweep_out))})


def prepare_worldbench(spec: WorldbenchSpec, sweep_out: str | Path) -> dict[str, Any]:
    """The data dir, built unless given or already built with the same key; {data, cached, wall_s}."""
    import time

    from envace.sweeps.cache import code_version

    t0 = time.perf_counter()
    data = spec.data_dir(sweep_out)
    if spec.data:
        from envace.worldbench.build import source_dirs

        source_dirs(data)  # a missing or empty dir fails here, before any cell trains
        return {"data": str(data), "cached": True, "wall_s": 0.0}
    cfg = _build_config(spec, sweep_out)
    key = hashlib.sha256(json.dumps({"build": cfg.digest(), "code": code_version()}).encode()).hexdigest()[:24]
    marker = data / KEY_FILE
    if marker.is_file() and marker.read_text().strip() == key and (data / "manifest.json").is_file():
        return {"data": str(data), "cached": True, "wall_s": 0.0}
    from envace.worldbench.build import build

    marker.unlink(missing_ok=True)
    build(cfg)
    marker.write_text(key + "\n")
    return {"data": str(data), "cached": False, "wall_s": time.perf_counter() - t0}


def world_model_dir(model: str | Path) -> Path:
    """The world model of a checkpoint: its `rehearse/` model (per-role), else `policy/`, else the dir itself."""
    p = Path(model)
    for name in ("rehearse", "policy"):
        if (p / name / "config.json").is_file():
            return p / name
    return p


def score_world_model(model: str | Path, data: str | Path, overrides: Sequence[str], out: str | Path,
                      ) -> tuple[dict[str, float], str]:
    """Worldbench scores of one model: (`worldbench/<source>/<metric>` metrics, path of worldbench.json)."""
    from envace.config import load_config
    from envace.worldbench.config import ScoreConfig
    from envace.worldbench.run import _safe, metrics, score

    cfg = load_config(ScoreConfig, None, list(overrides), data=str(data), out=str(out),
                      model={"model_dir": str(world_model_dir(model))}, reference_rows=[], seed=0,
                      tracking={"enabled": False})
    result = score(cfg)
    (name,) = result["rows"]
    prefix = _safe(name) + "/"
    found = {f"worldbench/{k.removeprefix(prefix)}": v for k, v in metrics(result).items() if k.startswith(prefix)}
    return found, str(Path(out) / "worldbench.json")


def data_key(spec_data: str | None) -> str | None:
    """The content hash of a worldbench data dir for cell cache keys (None before it exists)."""
    if not spec_data or not Path(spec_data).is_dir():
        return None
    from envace.sweeps.cache import input_hash

    return input_hash(spec_data)


# ----- the table ----------------------------------------------------------------------------------------


def transition_scores(record: Mapping[str, Any]) -> pd.DataFrame | None:
    """One row per scored transition of a cell (id, source, leaf_f1, exact), or None without a score file."""
    import pandas as pd

    path = record.get("worldbench_file")
    if not path or not Path(path).is_file():
        return None
    result = json.loads(Path(path).read_text())
    (row,) = result["rows"].values()
    lines = Path(row["scores_file"]).read_text(encoding="utf-8").splitlines()
    recs = [json.loads(line) for line in lines if line.strip()]
    return pd.DataFrame({"id": [r["id"] for r in recs], "source": [r["source"] for r in recs],
                         "leaf_f1": [float(r["leaf_f1"]) for r in recs], "exact": [float(r["exact"]) for r in recs]})


def _matrix(frames: Sequence[pd.DataFrame], metric: str, ids: list[str]) -> np.ndarray:
    """(transitions, seeds) values of `metric`, transitions in `ids` order."""
    import numpy as np

    cols = []
    for f in frames:
        by_id = dict(zip(f["id"], f[metric]))
        if set(by_id) != set(ids):
            raise ValueError("cells were scored on different worldbench transitions and cannot be paired; score "
                             "every cell with the same worldbench data and overrides")
        cols.append([by_id[i] for i in ids])
    return np.array(cols, dtype=float).T


def world_model_report(records: Sequence[Mapping[str, Any]], *, n_boot: int = 10_000) -> pd.DataFrame:
    """Task gain vs world-model gain per trained arm against its base row (module docstring)."""
    import pandas as pd

    from envace.evaluation.paired import compare
    from envace.sweeps.paired_report import cell_scores, stack
    from envace.worldbench.score import paired_gain

    groups: dict[str, dict[str, Any]] = {}
    for r in records:
        g = groups.setdefault(r["group"], {"kind": r.get("kind"), "model": _model_key(r.get("start_model")),
                                           "cells": {}})
        g["cells"][int(r["seed"])] = r
    bases = {g["model"]: name for name, g in groups.items() if g["kind"] == "eval" and g["model"]}
    rows = []
    for name, g in groups.items():
        if g["kind"] != "train" or g["model"] not in bases:
            continue
        base = bases[g["model"]]
        seeds = sorted(set(g["cells"]) & set(groups[base]["cells"]))
        if not seeds:
            continue
        task = {m: (float("nan"),) * 3 for m in TASK_METRICS}
        n_tasks = 0
        a = [cell_scores(groups[base]["cells"][s]) for s in seeds]
        b = [cell_scores(g["cells"][s]) for s in seeds]
        if all(x is not None for x in a + b):
            cmp = compare(stack(a), stack(b), n_boot=n_boot)
            task = {m: (cmp[m]["diff"], cmp[m]["boot_lo"], cmp[m]["boot_hi"]) for m in TASK_METRICS}
            n_tasks = cmp["tasks"]
        wa = [transition_scores(groups[base]["cells"][s]) for s in seeds]
        wb = [transition_scores(g["cells"][s]) for s in seeds]
        if any(x is None for x in wa + wb):
            continue
        sources = sorted(set(wa[0]["source"]))
        for source in ["all", *sources]:
            pick = [f if source == "all" else f[f["source"] == source] for f in wa]
            ids = list(pick[0]["id"])
            other = [f if source == "all" else f[f["source"] == source] for f in wb]
            row: dict[str, Any] = {"arm": name, "base": base, "seeds": ",".join(map(str, seeds)), "source": source,
                                   "tasks": n_tasks, "transitions": len(ids)}
            for m in TASK_METRICS:
                row.update({f"task_{m}_gain": task[m][0], f"task_{m}_lo": task[m][1], f"task_{m}_hi": task[m][2]})
            for m in GAIN_METRICS:
                gain = paired_gain(_matrix(pick, m, ids), _matrix(other, m, ids), n_boot=n_boot)
                row.update({f"wm_{m}_gain": gain[0], f"wm_{m}_lo": gain[1], f"wm_{m}_hi": gain[2]})
            rows.append(row)
    return pd.DataFrame(rows, columns=COLUMNS)


def gain_tracking(records: Sequence[Mapping[str, Any]], *, task_metric: str = "eval/world/success",
                  wm_metric: str = "leaf_f1", n_boot: int = 10_000, seed: int = 0) -> dict[str, Any]:
    """Spearman's rho between the task gain and the world-model gain of the trained cells (module docstring):
    {"points": [{arm, seed, task_gain, wm_gain}], "cells", "rho", "lo", "hi"} (NaN where < 3 cells or a
    constant axis)."""
    import numpy as np

    base_of: dict[tuple[str, int], Mapping[str, Any]] = {}
    for r in records:
        if r.get("kind") == "eval" and r.get("start_model"):
            base_of[_model_key(r["start_model"]), int(r["seed"])] = r
    base_wm: dict[int, float | None] = {}  # a base row's mean, read once however many arms share it

    def wm_mean(rec: Mapping[str, Any]) -> float | None:
        frame = transition_scores(rec)
        return None if frame is None else float(frame[wm_metric].mean())

    points = []
    for r in records:
        b = base_of.get((_model_key(r.get("start_model")), int(r["seed"]))) if r.get("kind") == "train" else None
        if b is None or task_metric not in r.get("metrics", {}) or task_metric not in b.get("metrics", {}):
            continue
        if id(b) not in base_wm:
            base_wm[id(b)] = wm_mean(b)
        wa, wb = base_wm[id(b)], wm_mean(r)
        if wa is None or wb is None:
            continue
        points.append({"arm": r["group"], "seed": int(r["seed"]),
                       "task_gain": float(r["metrics"][task_metric]) - float(b["metrics"][task_metric]),
                       "wm_gain": wb - wa})
    out: dict[str, Any] = {"points": points, "cells": len(points), "rho": float("nan"), "lo": float("nan"),
                           "hi": float("nan")}
    if len(points) < 3:
        return out
    x = np.array([p["task_gain"] for p in points])
    y = np.array([p["wm_gain"] for p in points])
    out["rho"] = spearman(x, y)
    rng = np.random.default_rng(seed)
    boots = [spearman(x[i], y[i]) for i in rng.integers(0, len(points), size=(n_boot, len(points)))]
    boots = [b for b in boots if b == b]
    if boots:
        out["lo"], out["hi"] = (float(v) for v in np.percentile(boots, [2.5, 97.5]))
    return out


def spearman(x: np.ndarray, y: np.ndarray) -> float:
    """Spearman's rank correlation (average ranks for ties); NaN when either side is constant."""
    import pandas as pd

    rx, ry = pd.Series(x).rank().to_numpy(), pd.Series(y).rank().to_numpy()
    if rx.std() == 0 or ry.std() == 0:
        return float("nan")
    rho = ((rx - rx.mean()) * (ry - ry.mean())).sum() / (len(rx) * rx.std() * ry.std())
    return float(min(1.0, max(-1.0, rho)))  # rounding can step past +-1


def markdown_tracking(tracking: Mapping[str, Any]) -> str:
    if tracking["cells"] < 3 or tracking["rho"] != tracking["rho"]:
        return f"Task gain vs world-model gain: {tracking['cells']} trained cells, too few or constant for a rank " \
               f"correlation."
    return (f"Task gain vs world-model gain (leaf F1, all sources) over {tracking['cells']} trained cells: "
            f"Spearman rho {tracking['rho']:+.2f} [{tracking['lo']:+.2f}, {tracking['hi']:+.2f}] "
            f"(bootstrap over cells).")


def _model_key(path: Any) -> str:
    return str(Path(str(path)).resolve()) if path else ""


def gain_text(d: float, lo: float, hi: float) -> str:
    """'+d [lo, hi]' for a table cell; 'n/a' without a value (no task evaluation), '+d' without an interval."""
    if d != d:
        return "n/a"
    return f"{d:+.3f} [{lo:+.3f}, {hi:+.3f}]" if lo == lo else f"{d:+.3f}"


def markdown_world_models(table: pd.DataFrame) -> str:
    if table.empty:
        return "(no world-model comparisons: no trained arm and base row both hold worldbench scores)"
    lines = ["| arm | vs | seeds | source | task success gain | task reward gain | transitions | "
             "leaf F1 gain | exact gain |", "|---|---|---|---|---|---|---:|---|---|"]
    for _, r in table.iterrows():
        lines.append(f"| {r['arm']} | {r['base']} | {r['seeds']} | {r['source']} | "
                     f"{gain_text(r['task_success_gain'], r['task_success_lo'], r['task_success_hi'])} | "
                     f"{gain_text(r['task_reward_gain'], r['task_reward_lo'], r['task_reward_hi'])} | "
                     f"{r['transitions']} | "
                     f"{gain_text(r['wm_leaf_f1_gain'], r['wm_leaf_f1_lo'], r['wm_leaf_f1_hi'])} | "
                     f"{gain_text(r['wm_exact_gain'], r['wm_exact_lo'], r['wm_exact_hi'])} |")
    return "\n".join(lines)


def write_world_models(out_dir: str | Path, table: pd.DataFrame,
                       tracking: Mapping[str, Any] | None = None) -> dict[str, Path]:
    """results/world_models.csv and .md (the table, then the tracking line) and, with `tracking`, its
    points as world_model_points.csv."""
    import pandas as pd

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"world_models.csv": out / "world_models.csv", "world_models.md": out / "world_models.md"}
    table.to_csv(paths["world_models.csv"], index=False)
    text = markdown_world_models(table)
    if tracking is not None:
        text += "\n\n" + markdown_tracking(tracking)
        paths["world_model_points.csv"] = out / "world_model_points.csv"
        pd.DataFrame(tracking["points"], columns=["arm", "seed", "task_gain", "wm_gain"]).to_csv(
            paths["world_model_points.csv"], index=False)
    paths["world_models.md"].write_text(text + "\n")
    return paths
