"""Provenance records of a run, pure (no MLflow, no database): the git state of the code (gitinfo), DVC-
compatible content hashes of data and model directories (dvc_hash), and which checkpoint a score belongs
to (checkpoint_ref). The tracking services (`envace.tracking`) write them into MLflow and the store."""
