"""Checkpoints in an MLflow run and the model registry.

`log_checkpoint` (called by the trainer at every save) uploads a checkpoint directory as artifacts up to
`CHECKPOINT_ARTIFACT_MAX_MB` (TrackingConfig.checkpoint_artifact_max_mb) and links it by path above that; each
is listed in the run's `envace.ckpt.<step dir>` tag (`logged_checkpoints`) with its content hash, and the
final one is registered as a model version. An evaluation tags its run with the checkpoint it scored
(`envace.provenance.checkpoint_ref`).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient

from envace.tracking.mlflow_run import MlflowRun

CHECKPOINT_ARTIFACT_MAX_MB = 512.0
CHECKPOINT_TAG = "envace.ckpt."  # + the checkpoint directory's name: JSON {step, bytes, uploaded, source, path, hash}


def log_checkpoint(run: MlflowRun, directory: str | Path, artifact_path: str | None = None,
                   register_as: str | None = None, *, max_artifact_mb: float = CHECKPOINT_ARTIFACT_MAX_MB,
                   content_hash: str | None = None, step: int | None = None) -> str | None:
    """Record a checkpoint directory in `run`; with `register_as`, also create a model version of it
    in the registry (returns its version number).

    Up to `max_artifact_mb` (the directory's total size) the files are uploaded as artifacts under
    `artifact_path` (default `checkpoints/<dir name>`), and that upload is the version's source. Larger
    checkpoints are not copied (the artifact store would hold every save of a multi-GB model): the
    run records a link to the directory instead, and the version's source is that directory's path
    (it stays valid while the directory is kept: the trainer prunes all but `keep_checkpoints`).
    Either way the run gets the tag `envace.ckpt.<dir name>` = JSON {step, bytes, uploaded, source,
    path, hash}, which `logged_checkpoints` reads back."""
    d = Path(directory)
    if not d.is_dir():
        raise NotADirectoryError(f"checkpoint {d} is not a directory")
    size = sum(f.stat().st_size for f in d.rglob("*") if f.is_file())
    path = artifact_path or f"checkpoints/{d.name}"
    uploaded = size <= max_artifact_mb * 2**20
    if uploaded:
        run.client.log_artifacts(run.run_id, str(d), path)
        source = f"{run.artifact_uri}/{path}"
    else:
        source = str(d.resolve())
    record = {"step": step, "bytes": size, "uploaded": uploaded, "source": source, "path": str(d.resolve()),
              "hash": content_hash}
    run.set_tags({f"{CHECKPOINT_TAG}{d.name}": json.dumps(record, sort_keys=True)})
    if register_as is None:
        return None
    try:
        run.client.create_registered_model(register_as)
    except MlflowException as exc:
        if "RESOURCE_ALREADY_EXISTS" not in str(exc.error_code):
            raise
    tags = {"envace.checkpoint.path": str(d.resolve()), "envace.checkpoint.uploaded": str(uploaded).lower()}
    if content_hash:
        tags["envace.checkpoint.hash"] = content_hash
    if step is not None:
        tags["envace.checkpoint.step"] = str(step)
    mv = run.client.create_model_version(register_as, source=source, run_id=run.run_id, tags=tags)
    return str(mv.version)


def checkpoint_recorded(run: MlflowRun, name: str, *, register_as: str | None = None,
                        step: int | None = None) -> bool:
    """Whether `log_checkpoint` finished for checkpoint directory `name` in `run`: its tag is set (only after
    the upload completed) and, with `register_as`, a model version of this run at `step` exists. A kill
    during the upload or before the registration leaves this False, so a resume logs it again."""
    if name not in logged_checkpoints(run.client, run.run_id):
        return False
    if register_as is None:
        return True
    try:
        versions = run.client.search_model_versions(f"name='{register_as}' and run_id='{run.run_id}'")
    except MlflowException:
        return False
    return any(step is None or v.tags.get("envace.checkpoint.step") == str(step) for v in versions)


def logged_checkpoints(client: MlflowClient, run_id: str) -> dict[str, dict[str, Any]]:
    """{checkpoint directory name: its record} of every checkpoint `log_checkpoint` recorded in a run."""
    tags = client.get_run(run_id).data.tags
    return {k[len(CHECKPOINT_TAG):]: json.loads(v) for k, v in sorted(tags.items()) if k.startswith(CHECKPOINT_TAG)}


def registered_model_name(name: str) -> str:
    """A registered-model name from a run name: letters, digits, '-', '_' and '.' only."""
    return re.sub(r"[^A-Za-z0-9_.-]", "-", name).strip("-.") or "envace-model"
