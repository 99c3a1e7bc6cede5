"""FinMCP-Bench adapter: user-provided records and tool schemas, a replay tool server, the teacher-forced
multi-turn loop and the official name-multiset metrics (macro / micro P, R, F1; EMR). See benchmark.py."""

from envace.benchmarks.finmcp.benchmark import FinMCPBenchmark

__all__ = ["FinMCPBenchmark"]
