"""BFCL aggregation (hand-worked, and against BFCL's own `generate_leaderboard_csv`), tool-schema conversion,
data loading and the benchmark registry."""

from __future__ import annotations

import csv
import random

import pytest

from envace.benchmarks.base import BenchmarkResult, get_benchmark, register_benchmark
from envace.benchmarks.bfcl import BFCLBenchmark
from envace.benchmarks.bfcl.compat import CHECKER_MODEL
from envace.benchmarks.bfcl.data import AGENTIC, MULTI_TURN, RUNNABLE, category_size, load_category, openai_tools
from envace.benchmarks.bfcl.scoring import LEADERBOARD_WEIGHTS, aggregate

pytestmark = pytest.mark.usefixtures("bfcl_modules")


def test_hand_worked_aggregation():
    acc = {c: (1.0, 10) for c in RUNNABLE}
    acc.update({c: (0.0, 10) for c in MULTI_TURN})
    acc.update({"live_simple": (1.0, 2), "live_multiple": (0.0, 6), "live_parallel": (0.5, 4),
                "live_parallel_multiple": (1.0, 8), "simple_java": (0.4, 10), "simple_javascript": (0.1, 10),
                "irrelevance": (0.2, 10), "live_irrelevance": (0.6, 10)})
    groups, partial = aggregate(acc)
    assert partial == []
    assert groups["simple_ast"] == pytest.approx((1.0 + 0.4 + 0.1) / 3)
    assert groups["non_live"] == pytest.approx((0.5 + 1 + 1 + 1) / 4)
    assert groups["live"] == pytest.approx((1.0 * 2 + 0 * 6 + 0.5 * 4 + 1.0 * 8) / 20)  # count-weighted: 0.6
    assert groups["irrelevance"] == pytest.approx(0.4)
    assert groups["multi_turn"] == 0.0 and groups["live_relevance"] == 1.0
    # memory_kv = memory_rec_sum = 1, memory_vector and web search cannot run (0):
    # memory = (1 + 0 + 1) / 3, agentic = (web search 0 + memory 2/3) / 2 = 1/3
    assert groups["memory"] == pytest.approx(2 / 3) and groups["agentic"] == pytest.approx(1 / 3)
    assert groups["memory_offline"] == 1.0
    weighted = 10 * 0.875 + 10 * 0.6 + 10 * 0.4 + 30 * 0.0
    assert groups["overall_official"] == pytest.approx((weighted + 40 / 3) / 100)
    assert groups["overall_official_agentic_as_0"] == groups["overall_official"]
    # offline headline: web search (20) and memory_vector (20/3) left out of the 100
    assert groups["overall_offline"] == pytest.approx((weighted + 20 / 3 + 20 / 3) / (100 - 20 - 20 / 3))
    assert groups["overall_no_agentic"] == pytest.approx(weighted / 60)
    assert sum(LEADERBOARD_WEIGHTS.values()) == 100


def test_missing_category_counts_zero_with_its_full_size():
    acc = {c: (1.0, 5) for c in RUNNABLE if c != "live_multiple"}
    groups, partial = aggregate(acc)
    n = category_size("live_multiple")
    assert n == 1053
    assert groups["live"] == pytest.approx(15 / (15 + n))
    assert partial == ["live"]


def _csv_row(path):
    with open(path) as f:
        return next(csv.DictReader(f))


def test_aggregation_matches_bfcl_leaderboard_code(bfcl_modules, tmp_path):
    rng = random.Random(7)
    acc = {c: (rng.random(), rng.randint(5, 60)) for c in RUNNABLE}
    groups, _ = aggregate(acc)
    table = {CHECKER_MODEL: {c: {"accuracy": a, "total_count": n} for c, (a, n) in acc.items()}}
    bfcl_modules.helper.generate_leaderboard_csv(table, tmp_path)
    pct = lambda s: float(s.rstrip("%")) / 100  # noqa: E731
    overall = _csv_row(tmp_path / "data_overall.csv")
    assert overall["Overall Acc"] and pct(overall["Overall Acc"]) == pytest.approx(groups["overall_official"], abs=6e-5)
    agentic = _csv_row(tmp_path / "data_agentic.csv")
    assert pct(agentic["Agentic Overall Acc"]) == pytest.approx(groups["agentic"], abs=6e-5)
    assert pct(agentic["Memory KV"]) == pytest.approx(acc["memory_kv"][0], abs=6e-5)
    assert agentic["Memory Summary"] == "N/A"  # memory_vector did not run: BFCL shows N/A, scores it 0
    assert pct(overall["Irrelevance Detection"]) == pytest.approx(groups["irrelevance"], abs=6e-5)
    assert pct(_csv_row(tmp_path / "data_non_live.csv")["Non-Live Overall Acc"]) == pytest.approx(
        groups["non_live"], abs=6e-5)
    assert pct(_csv_row(tmp_path / "data_live.csv")["Live Overall Acc"]) == pytest.approx(groups["live"], abs=6e-5)
    assert pct(_csv_row(tmp_path / "data_multi_turn.csv")["Multi Turn Overall Acc"]) == pytest.approx(
        groups["multi_turn"], abs=6e-5)


def test_openai_tool_conversion_is_bfcls():
    doc = {"name": "math.factorial", "description": "n!",
           "parameters": {"type": "dict", "required": ["n"], "properties": {
               "n": {"type": "integer", "description": "n"},
               "x": {"type": "float", "description": "scale"},
               "t": {"type": "tuple", "description": "pair", "items": {"type": "string"}},
               "m": {"type": "dict", "description": "opts", "properties": {"k": {"type": "any", "description": "k"}}}}}}
    (tool,) = openai_tools([doc])
    fn = tool["function"]
    assert tool["type"] == "function" and fn["name"] == "math_factorial"
    props = fn["parameters"]["properties"]
    assert fn["parameters"]["type"] == "object" and fn["parameters"]["required"] == ["n"]
    assert props["n"]["type"] == "integer"
    assert props["x"] == {"type": "number", "format": "float", "description": "scale This is a float type value."}
    assert props["t"]["type"] == "array" and props["t"]["items"]["type"] == "string"
    assert props["m"]["type"] == "object" and props["m"]["properties"]["k"]["type"] == "string"
    assert doc["parameters"]["type"] == "dict"  # the input is not modified


def test_data_views_and_counts():
    java = load_category("simple_java", 2)
    assert [e.id for e in java] == ["simple_java_0", "simple_java_1"]
    shown = java[0].prompt["function"][0]
    checked = java[0].eval_prompt["function"][0]
    assert shown["description"].endswith("Note that the provided function is in Java 8 SDK syntax.")
    assert {p["type"] for p in shown["parameters"]["properties"].values()} == {"string"}  # hints rewrite types
    assert checked["parameters"]["properties"]["controller"]["type"] == "any"  # eval view keeps Java types
    assert [category_size(c) for c in ("simple_python", "live_simple", "multi_turn_base")] == [400, 258, 200]
    assert load_category("live_relevance", None)[0].ground_truth is None
    with pytest.raises(ValueError, match="not run here"):
        load_category("web_search_base")
    with pytest.raises(ValueError, match="unknown BFCL category"):
        BFCLBenchmark(["simple"])


def test_registry_and_result_round_trip(tmp_path):
    bench = get_benchmark("bfcl", categories=["irrelevance"])
    assert isinstance(bench, BFCLBenchmark) and bench.categories == ["irrelevance"]
    with pytest.raises(KeyError, match="bfcl"):
        get_benchmark("no-such-bench")
    with pytest.raises(ValueError, match="already registered"):
        register_benchmark("bfcl", lambda: None)
    from envace.benchmarks.bfcl.gold import BFCLGoldPolicy

    res = bench.run(BFCLGoldPolicy(load_category("irrelevance", 2)), limit=2)
    loaded = BenchmarkResult.load(res.save(tmp_path / "r.json"))
    assert loaded.categories["irrelevance"].accuracy == 1.0 and loaded.categories["irrelevance"].entries == 2
    assert loaded.groups == res.groups and loaded.departures == res.departures
    assert set(AGENTIC) | set(RUNNABLE) <= set(loaded.categories)
    assert loaded.categories["memory_kv"].note.startswith("not selected")
    assert loaded.meta["categories_run"] == ["irrelevance"]
