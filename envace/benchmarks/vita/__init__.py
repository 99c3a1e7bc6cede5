"""VitaBench adapter: tasks, environments and prompts from a user's checkout, our agent / user loop, the
sliding-window rubric judge over any backend, Avg@k per set. See benchmark.py."""

from envace.benchmarks.vita.benchmark import VitaBenchmark
from envace.benchmarks.vita.scoring import RubricJudge, sliding_windows

__all__ = ["RubricJudge", "VitaBenchmark", "sliding_windows"]
