"""Where a run's records live: the one rule every command uses (train, eval, worldbench, demo, sweeps,
the cluster pipeline, the Prefect flows).

`locations(out_dir, kind, mlflow_uri=..., store_url=...)` returns a `RunLocations`:
- **MLflow**: an explicit URI (or directory, `envace.tracking.mlflow_run.resolve_tracking_uri`) wins;
  otherwise `sqlite:///<mlflow_dir>/mlflow.db`, artifacts in `<mlflow_dir>/mlartifacts`, where
  `mlflow_dir` depends on what the output folder holds (`Kind`):
  - one job (`train`, `eval`): `<out_dir>/../mlflow`, shared by the jobs that sit side by side in one
    folder (runs/rl_x, runs/eval_x), so one MLflow UI shows them together;
  - a group of runs (`sweep`, `cluster`, `pipeline`, `flow`): `<out_dir>/mlflow`, its parent run and
    every child;
  - a self-contained result folder (`demo`, `worldbench`): `<out_dir>` itself, `mlflow.db` beside
    `store.db` and the results.
- **store**: an explicit path or SQLAlchemy URL wins; otherwise `<out_dir>/store.db`.
- **run ids**: `<out_dir>/tracking_runs.json`, the ids of the run that last started in the folder.

Paths are absolute (resolved against the working directory when computed), so a cell that runs in
another process or on another node writes to the same files. Pure: nothing is created here (the MLflow
client and the store create their files on first use).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from pathlib import Path

RUN_IDS = "tracking_runs.json"
STORE_FILE = "store.db"
MLFLOW_FILE = "mlflow.db"
MLFLOW_DIR = "mlflow"


class Kind(str, Enum):
    """What an output folder holds; decides where its MLflow database goes when none is given."""

    TRAIN = "train"
    EVAL = "eval"
    SWEEP = "sweep"
    CLUSTER = "cluster"
    PIPELINE = "pipeline"
    FLOW = "flow"
    DEMO = "demo"
    WORLDBENCH = "worldbench"


_SHARED_WITH_SIBLINGS = {Kind.TRAIN, Kind.EVAL}
_SELF_CONTAINED = {Kind.DEMO, Kind.WORLDBENCH}


@dataclass(frozen=True)
class RunLocations:
    out_dir: Path  # the run's own folder (absolute)
    mlflow_uri: str  # MLflow tracking URI (or a directory: resolve_tracking_uri turns it into one)
    store_url: str  # trajectory store: a file path or a SQLAlchemy URL

    @property
    def run_ids_file(self) -> Path:
        return self.out_dir / RUN_IDS


def mlflow_dir(out_dir: str | Path, kind: Kind | str) -> Path:
    """The folder of the default `mlflow.db` (and `mlartifacts/`) of a `kind` run writing to `out_dir`."""
    kind = Kind(kind)
    out = Path(out_dir).expanduser().resolve()
    if kind in _SHARED_WITH_SIBLINGS:
        return out.parent / MLFLOW_DIR
    if kind in _SELF_CONTAINED:
        return out
    return out / MLFLOW_DIR


def default_mlflow_files(out_dir: str | Path) -> list[Path]:
    """The default `mlflow.db` files a run writing to `out_dir` may have used, for a reader that knows
    only the folder (the dashboard, from a store path): `<out_dir>/mlflow/` (a group of runs),
    `<out_dir>/../mlflow/` (one job), `<out_dir>/` (demo, worldbench)."""
    return [mlflow_dir(out_dir, kind) / MLFLOW_FILE for kind in (Kind.SWEEP, Kind.TRAIN, Kind.DEMO)]


def locations(out_dir: str | Path, kind: Kind | str, *, mlflow_uri: str | Path | None = None,
              store_url: str | Path | None = None) -> RunLocations:
    """Where a `kind` run writing to `out_dir` logs: explicit `mlflow_uri` / `store_url` (a config's
    `tracking.*`) win, the rule above fills in the rest."""
    out = Path(out_dir).expanduser().resolve()
    uri = str(mlflow_uri) if mlflow_uri else f"sqlite:///{mlflow_dir(out, kind) / MLFLOW_FILE}"
    store = str(store_url) if store_url else str(out / STORE_FILE)
    return RunLocations(out_dir=out, mlflow_uri=uri, store_url=store)
