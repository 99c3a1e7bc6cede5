"""The data versioning flow: export tool-world splits (CM2 JSON + verl parquet), `dvc add` the snapshot
(pushed to the repository's default DVC remote, a local `.dvc-storage` unless configured), and record
the DVC md5 of the snapshot and of every file in an MLflow run (tags `input.<path>`), so any later run
that reads the data can be matched to it.

The default snapshot path (`data/snapshots/world_seed<seed>`) is deliberately not `data/world`, which
is the output of the `data` stage of dvc.yaml: DVC refuses to track one path both ways.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger, task

from envace.data.export import export_world
from envace.data.versioning import add_dataset
from envace.provenance.dvc_hash import input_hashes
from envace.tracking.locations import Kind, locations
from envace.tracking.run_record import tracked_run


@task(name="export-world")
def export_task(out_dir: str, counts: dict[str, int], seed: int) -> dict[str, Any]:
    return export_world(out_dir, counts, seed)


@task(name="dvc-add")
def version_task(path: str, repo_root: str, push: bool) -> dict[str, Any]:
    v = add_dataset(path, repo_root, push=push)
    return {"path": str(v.path), "md5": v.md5, "dvc_file": str(v.dvc_file), "remote": v.remote}


@task(name="data-hashes")
def hashes_task(paths: list[str]) -> dict[str, str]:
    return input_hashes(paths)


@task(name="log-data-version")
def log_task(mlflow_uri: str, experiment: str, run_name: str, params: dict[str, Any],
             paths: list[str], record: dict[str, Any]) -> str:
    tags = {"dvc.md5": record["version"]["md5"]}
    with tracked_run(mlflow_uri, experiment, run_name, params, kind="data", tags=tags, input_paths=paths) as run:
        run.log_artifact_dict(record, "data/version.json")
    return run.run_id


@flow(name="data-versioning")
def data_versioning(out_dir: str | None = None, counts: dict[str, int] | None = None, seed: int = 0,
                    repo_root: str = ".", push: bool = True, mlflow_uri: str | None = None,
                    experiment: str = "envace-data") -> dict[str, Any]:
    """Export, DVC-add and hash a tool-world snapshot; returns md5, per-file hashes and the MLflow run id."""
    logger = get_run_logger()
    counts = counts or {"train": 4000, "val": 200, "test": 200}
    out = out_dir or str(Path(repo_root) / "data" / "snapshots" / f"world_seed{seed}")
    summary = export_task(out, counts, seed)
    version = version_task(out, repo_root, push)
    files = [str(v) for split in summary.values() for k, v in split.items() if k in ("cm2", "parquet")]
    hashes = hashes_task([out, *files])
    record = {"summary": summary, "version": version, "hashes": hashes, "counts": counts, "seed": seed}
    uri = locations(Path(repo_root) / "runs", Kind.FLOW, mlflow_uri=mlflow_uri).mlflow_uri  # runs/mlflow/
    run_id = log_task(uri, experiment, f"data-{Path(out).name}",
                      {"counts": counts, "seed": seed, "out_dir": out}, [out, *files], record)
    logger.info("dataset %s: md5 %s (%s), MLflow run %s", out, version["md5"], version["dvc_file"], run_id)
    return {**record, "mlflow_run_id": run_id}
