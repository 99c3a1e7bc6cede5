"""Benchmark adapters (BFCL-v4, τ²-Bench, VitaBench, FinMCP-Bench) behind one contract (base.py) and one
report (report.py). Adapters import their optional packages lazily: see `base.get_benchmark`."""
