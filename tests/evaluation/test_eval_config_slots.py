"""EvalConfig: the three model slots, the old shorthands, the paper's protocol defaults, and the
benchmark options handed to each adapter (no model is loaded here)."""

from __future__ import annotations

import pytest

from envace.config import ConfigError, load_config
from envace.engines.slots import SlotKind
from envace.evaluation.config import EvalConfig


def test_protocol_defaults_and_the_model_shorthand():
    cfg = load_config(EvalConfig, None, [], model="runs/x/step_000010")
    assert cfg.k == 4  # the paper's Avg@4
    assert cfg.policy.model_dir == "runs/x/step_000010" and cfg.policy.kind is SlotKind.LOCAL
    assert (cfg.policy.temperature, cfg.policy.top_p) == (0.6, 0.95)  # Avg@4 samples
    assert cfg.user_sim is None and cfg.judge is None and cfg.model_name() == "step_000010"
    # explicit sampling and k win over the protocol defaults
    cfg = load_config(EvalConfig, None, ["policy.temperature=0", "k=1"], model="m")
    assert (cfg.policy.temperature, cfg.policy.top_p, cfg.k) == (0.0, 0.95, 1)


def test_slots_from_overrides_and_the_old_user_sim_model():
    cfg = load_config(EvalConfig, None, ["judge.base_url=http://judge:8000/v1", "judge.model=qwen",
                                         "judge.api_key_env=JUDGE_KEY", "user_sim_model=models/user"], model="m")
    assert cfg.judge.kind is SlotKind.ENDPOINT and cfg.judge.api_key_env == "JUDGE_KEY"
    assert cfg.judge.temperature == 0.0  # only the policy gets the protocol's sampling
    assert cfg.user_sim.model_dir == "models/user"
    endpoint = load_config(EvalConfig, None, ["policy.base_url=http://h:1/v1", "policy.model=org/name",
                                              "benchmarks=[bfcl,tau2]"])
    assert endpoint.model is None and endpoint.model_name() == "org_name"


@pytest.mark.parametrize("overrides, match", [
    (["benchmarks=[world]", "policy.base_url=http://h:1/v1", "policy.model=m"], "drop world"),
    (["model=a", "policy.model_dir=b"], "disagree"),
    (["benchmarks=[bfcl]"], "no policy model"),
    (["model=a", "judge.base_url=http://j/v1"], "needs model=<served model name>"),
    (["model=a", "paths.finmcpp=x"], "finmcpp"),
])
def test_bad_configs_name_the_field(overrides, match):
    with pytest.raises(ConfigError, match=match):
        load_config(EvalConfig, None, overrides)


def test_bench_options_reach_each_adapter():
    cfg = load_config(EvalConfig, None, ["bench.bfcl_categories=[simple_python]", "bench.tau2_domains=[retail]",
                                         "bench.tau2_split=null", "bench.vita_sets=[delivery]",
                                         "bench.vita_language=zh", "paths.vita=/v", "paths.finmcp=/f"], model="m")
    assert cfg.bench.for_benchmark("bfcl") == {"categories": ["simple_python"]}
    assert cfg.bench.for_benchmark("tau2") == {"domains": ["retail"], "split": None, "max_steps": 200}
    assert cfg.bench.for_benchmark("vita") == {"sets": ["delivery"], "language": "zh", "max_steps": 300}
    assert cfg.bench.for_benchmark("finmcp") == {}
    assert cfg.paths.as_dict() == {"vita": "/v", "finmcp": "/f"}
    assert load_config(EvalConfig, None, [], model="m").bench.for_benchmark("bfcl") == {}  # adapter's own default


class _Silent:
    """A policy (test double) that answers every FinMCP turn with text and no tool call."""

    name = "silent"

    def reply(self, messages, tools, *, seed=None, context=None):
        from envace.engines.reply import AssistantReply

        return AssistantReply(content="no tools needed")


@pytest.mark.parametrize("temperature, noted", [(0.0, True), (0.6, False)])
def test_slots_are_recorded_beside_the_score_and_greedy_avg_at_k_is_a_departure(temperature, noted):
    from pathlib import Path

    from envace.benchmarks.run import run_benchmarks

    data = Path(__file__).resolve().parents[1] / "fixtures" / "bench" / "finmcp" / "benchmark_synthetic.json"
    cfg = load_config(EvalConfig, None, [f"policy.temperature={temperature}"], model="models/m")
    slots = {"policy": cfg.policy.describe(), "user_sim": None, "judge": None}
    out = run_benchmarks(["finmcp"], _Silent(), limit=None, k=2, seed=0, paths={"finmcp": str(data)}, slots=slots)
    res = out["results"]["finmcp"]
    assert res.meta["slots"] == {"policy": slots["policy"]}  # FinMCP has no user simulator or judge
    assert out["report"]["slots"]["finmcp"] == {"policy": slots["policy"]}
    # no tool call against gold [GetNav] and [GetFund, GetFund]: every TP/TR/TF1 is 0, over 2 records x 2 attempts
    assert res.groups["TF1_macro"] == 0.0 and res.categories["Fund"].total == 4
    assert any("decodes greedily" in d for d in res.departures) is noted
