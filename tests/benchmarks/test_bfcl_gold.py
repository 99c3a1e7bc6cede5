"""BFCL end to end through BFCL's own inference loop and checkers with a scripted policy: the ground truth
fed as the model's output scores 1.0, one perturbed call (or one dropped multi-turn call, or the opposite
relevance decision) scores 0. This checks our plumbing (data -> OpenAI tools -> policy -> decode ->
checkers), not a model."""

from __future__ import annotations

import pytest

from envace.benchmarks.bfcl import BFCLBenchmark
from envace.benchmarks.bfcl.data import NOT_RUNNABLE, RUNNABLE, load_category
from envace.benchmarks.bfcl.gold import BFCLGoldPolicy, java_source, js_source, parse_call

pytestmark = pytest.mark.usefixtures("bfcl_modules")

# A few entries of categories of every kind (the test below runs >= 50 of every runnable one).
QUICK = ["simple_python", "simple_java", "simple_javascript", "parallel_multiple", "live_multiple",
         "irrelevance", "live_relevance", "multi_turn_base", "multi_turn_miss_func", "multi_turn_miss_param"]
# Ground truths that no output can match (BFCL data quirks), found by running the gold policy on all
# 4,441 runnable entries: the other 4,433 score 1.
UNSATISFIABLE = {
    "simple_java_36": "ArrayList of `any` with 42 / true in the answer; BFCL's Java converter yields strings",
    "simple_java_64": "the HashMap answer's value is a bare string, so the checker iterates its characters",
    "simple_java_65": "ArrayList of `any` with true in the answer; BFCL's Java converter yields strings",
    "live_simple_106-63-0": "required parameters whose allowed-value lists are empty",
    "live_simple_112-68-0": "required parameters whose allowed-value lists are empty",
    "live_multiple_507-149-4": "required parameter origin_airport whose only allowed value is '' (absent)",
    "live_multiple_862-181-3": "answer uses journey_start_time, which the function doc does not declare",
    "live_multiple_964-207-0": "answer omits the required parameter statement",
}


def _run(categories, limit, perturb):
    entries = [e for c in categories for e in load_category(c, limit)]
    return BFCLBenchmark(categories).run(BFCLGoldPolicy(entries, perturb=perturb), limit=limit)


def test_gold_scores_one_and_perturbed_scores_zero():
    gold = _run(QUICK, 3, perturb=False)
    bad = _run(QUICK, 3, perturb=True)
    for cat in QUICK:
        assert gold.categories[cat].accuracy == 1.0, [r for r in gold.records if r["category"] == cat]
        assert bad.categories[cat].accuracy == 0.0, [r for r in bad.records if r["category"] == cat]
        assert gold.categories[cat].entries == 3 and gold.categories[cat].total == 3
    assert len(gold.records) == 3 * len(QUICK)
    kinds = {r["category"]: r["error_type"] for r in bad.records}
    assert kinds["simple_python"].startswith("value_error")
    assert kinds["irrelevance"] == "irrelevance_error:decoder_success"
    assert kinds["live_relevance"] == "relevance_error:decoder_failed"
    assert kinds["multi_turn_base"].startswith("multi_turn:")
    for cat in NOT_RUNNABLE:
        assert gold.categories[cat].accuracy is None and not gold.categories[cat].runnable
        assert gold.categories[cat].note.startswith("not run: ")
    assert gold.models == {"policy": "bfcl-gold", "user_simulator": None, "judge": None}
    assert any("cannot run offline" in d for d in gold.departures)
    assert any("first 3 entries" in d for d in gold.departures)
    assert all(r["task_error"] is None and r["seed"] == 0 for r in gold.records)
    mt = next(r for r in gold.records if r["category"] == "multi_turn_base")
    assert mt["messages"][0]["role"] == "user" and any(m["role"] == "tool" for m in mt["messages"])


def test_k_samples_are_independent():
    """k=2 reruns each multi-turn entry on fresh backend instances: both samples pass."""
    res = _run(["multi_turn_base"], 2, perturb=False)
    res2 = BFCLBenchmark(["multi_turn_base"], workers=2).run(BFCLGoldPolicy(load_category("multi_turn_base", 2)),
                                                             limit=2, k=2)
    assert res.categories["multi_turn_base"].accuracy == 1.0
    assert res2.categories["multi_turn_base"].total == 4 and res2.categories["multi_turn_base"].correct == 4
    assert sorted((r["id"], r["sample"]) for r in res2.records) == [
        ("multi_turn_base_0", 0), ("multi_turn_base_0", 1), ("multi_turn_base_1", 0), ("multi_turn_base_1", 1)]


def test_fifty_entries_of_every_runnable_category():
    gold = _run(RUNNABLE, 50, perturb=False)
    bad = _run(RUNNABLE, 50, perturb=True)
    for cat in RUNNABLE:
        failing = {r["id"] for r in gold.records if r["category"] == cat and not r["valid"]}
        assert failing <= set(UNSATISFIABLE), (cat, failing)
        assert gold.categories[cat].entries == min(50, len(load_category(cat)))
        assert bad.categories[cat].correct == 0, [r["id"] for r in bad.records if r["category"] == cat and r["valid"]]


def test_parse_ground_truth_calls():
    tools = [{"type": "function", "function": {"name": "sort", "parameters": {
        "type": "object", "properties": {"file_name": {"type": "string"}, "reverse": {"type": "boolean"}}}}}]
    call = parse_call("sort('final_report.pdf', reverse=True)", tools)
    assert (call.name, call.arguments) == ("sort", {"file_name": "final_report.pdf", "reverse": True})
    with pytest.raises(ValueError, match="positional"):
        parse_call("sort('a', True, 3)", tools)


def test_java_and_js_sources_round_trip_through_bfcl_converters(bfcl_modules):
    from bfcl_eval.eval_checker.ast_eval.type_convertor.java_type_converter import java_type_converter
    from bfcl_eval.eval_checker.ast_eval.type_convertor.js_type_converter import js_type_converter

    for value, typ, nested in [(True, "boolean", None), (7, "long", None), (2.5, "float", None),
                               (["a", "b"], "ArrayList", "String"), ([1, 2], "Array", "integer"),
                               ({"limit": 50, "schema": "public"}, "HashMap", None), ("x.y", "String", None)]:
        assert java_type_converter(java_source(value, typ, nested), typ, nested) == value, (value, typ)
    for value, typ in [(False, "Boolean"), (12, "Bigint"), ([1, "a"], "array"), ({"k": 1, "s": "v"}, "dict")]:
        assert js_type_converter(js_source(value, typ), typ) == value, (value, typ)
