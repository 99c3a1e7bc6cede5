"""Where a run logs (`TrackingConfig`): the MLflow URI and experiment, and the trajectory store. Embedded in
the train and eval configs; unset locations default through `envace.tracking.locations`."""

from __future__ import annotations

from pydantic import Field

from envace.config import BaseConfig


class TrackingConfig(BaseConfig):
    store_url: str | None = Field(None,
                                  description="Trajectory store (path or SQLAlchemy URL); None = <out_dir>/store.db.")
    mlflow_uri: str | None = Field(None, description="MLflow tracking URI; None = the command's default "
                                   "(envace.tracking.locations: sqlite under <out_dir>/../mlflow for train / eval).")
    experiment: str = Field("envace", description="MLflow experiment name.")
    enabled: bool = Field(True, description="Log to MLflow and the store.")
    parent_run_id: str | None = Field(None, description="MLflow parent run (sweeps).")
    registered_model: str | None = Field(None, description="MLflow registered model of a training run's final "
                                         "checkpoint; None = envace-<out_dir name>.")
    checkpoint_artifact_max_mb: float = Field(512.0, ge=0, description="Checkpoints up to this size are uploaded "
                                              "to MLflow as artifacts; larger ones are linked by path (not copied).")
