"""Experiment tracking, a service layer beside the store: where a run's records go (locations), the run
context that opens and ends its MLflow run and store runs together (run_record, lifecycle), MLflow runs and
checkpoints (mlflow_run, mlflow_checkpoints) and the `tracking:` config section (config). The provenance it
records (git state, DVC hashes, checkpoint references) lives in `envace.provenance`. Import from the
submodules: mlflow is heavy."""
