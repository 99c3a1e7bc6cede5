"""Experiment tracking: MLflow runs (mlflow_run), git state (gitinfo), DVC-compatible data hashes
(dvc_hash) and rehearsal-fidelity metrics (fidelity). Import from the submodules: mlflow is heavy."""
