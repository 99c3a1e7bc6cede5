"""Per-benchmark task scripts for the worldbench builder (see envace.worldbench.script)."""
