"""Experiment tracking: MLflow runs (mlflow_run), git state (gitinfo), DVC-compatible data hashes
(dvc_hash), run configs (config). Import from the submodules: mlflow is heavy."""
