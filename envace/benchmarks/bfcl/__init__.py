"""BFCL-v4 (Berkeley Function Calling Leaderboard) from the `bfcl-eval` package: its data, inference loop,
multi-turn backends and checkers, driven by any `BenchPolicy`. Importing this package does not import
`bfcl_eval`; that happens on first use (compat.load_bfcl)."""

from envace.benchmarks.bfcl.benchmark import BFCLBenchmark
from envace.benchmarks.bfcl.compat import BFCLUnavailable, bfcl_available

__all__ = ["BFCLBenchmark", "BFCLUnavailable", "bfcl_available"]
