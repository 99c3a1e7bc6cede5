"""The report: Overall = mean(BFCL, τ², Vita) (hand-worked, and the paper's own rows), FinMCP apart, notes
with models and departures; the benchmark registry's contract."""

from __future__ import annotations

import pytest

from envace.benchmarks import base
from envace.benchmarks.base import BenchmarkResult, CategoryScore, available_benchmarks, register_benchmark
from envace.benchmarks.report import PAPER_RESULTS, headline_scores, report_dict, report_table


def result(name: str, overall: float | None, groups=None, departures=("d1",)) -> BenchmarkResult:
    return BenchmarkResult(benchmark=name, categories={"c": CategoryScore("c", overall, 1, 2, 2)},
                           groups=groups or {}, overall=overall, overall_definition=f"{name} mean",
                           departures=list(departures),
                           models={"policy": "p", "user_simulator": "u" if name != "bfcl" else None, "judge": None},
                           k=4)


def test_paper_rows_are_consistent():
    for row in PAPER_RESULTS.values():
        assert (row["bfcl"] + row["tau2"] + row["vita"]) / 3 == pytest.approx(row["overall"], abs=0.006)


def test_overall_is_the_mean_of_the_three():
    scores = headline_scores([result("bfcl", 0.45), result("tau2", 0.30), result("vita", 0.15)])
    assert scores == pytest.approx({"bfcl": 45.0, "tau2": 30.0, "vita": 15.0, "overall": 30.0})
    partial = headline_scores({"b": result("bfcl", 0.45)})
    assert partial["overall"] is None and partial["tau2"] is None


def test_table_shows_ours_beside_the_paper_and_finmcp_apart():
    fin = result("finmcp", 0.5, groups={"tf1_macro": 0.4678, "tp_micro": 0.5, "emr": None})
    text = report_table([result("bfcl", 0.45), result("tau2", 0.30), result("vita", 0.15), fin], label="mine")
    assert "| mine | 45.00 | 30.00 | 15.00 | 30.00 |" in text
    assert "| Qwen3-8B (paper) | 44.04 | 30.00 | 11.40 | 28.48 |" in text
    assert "| mine | 46.78 | 50.00 |" in text and "emr" not in text.split("FinMCP")[1].split("\n")[3]
    assert "models: policy=p, user_simulator=u, judge=None" in text and "departure: d1" in text
    d = report_dict([result("bfcl", 0.45)])
    assert d["ours"]["bfcl"] == pytest.approx(45.0) and d["benchmarks"]["bfcl"]["k"] == 4
    with pytest.raises(ValueError, match="two results"):
        report_table([result("bfcl", 0.4), result("bfcl", 0.5)])


def test_registry():
    class Dummy:
        name = "dummy"

        def run(self, policy, *, limit=None, k=1, seed=0):
            return result("dummy", 1.0)

    def factory(**kw):
        return Dummy()

    register_benchmark("dummy", factory)
    try:
        register_benchmark("dummy", factory)  # same factory again: fine
        assert "dummy" in available_benchmarks() and "bfcl" in available_benchmarks()
        assert isinstance(base.get_benchmark("dummy"), base.Benchmark)
        with pytest.raises(ValueError, match="already registered"):
            register_benchmark("dummy", lambda **kw: Dummy())
        with pytest.raises(KeyError, match="valid names: bfcl, dummy, finmcp, tau2, vita$"):
            base.get_benchmark("nope")
    finally:
        base.BENCHMARKS.remove("dummy")
    assert "dummy" not in available_benchmarks()


def test_bfcl_notes_say_what_ran_and_what_the_headline_means(bfcl_modules):
    from envace.benchmarks.bfcl import BFCLBenchmark
    from envace.benchmarks.bfcl.data import load_category
    from envace.benchmarks.bfcl.gold import BFCLGoldPolicy

    r = BFCLBenchmark(["irrelevance"]).run(BFCLGoldPolicy(load_category("irrelevance", 2)), limit=2)
    text = report_table([r])
    # by hand: irrelevance group = (irrelevance 1 + live_irrelevance 0, not selected) / 2 = 0.5, weight 10;
    # offline share = 100 - 20 (web search) - 20/3 (memory_vector) = 73.33 -> 5 / 73.33 = 6.82 %;
    # official: 5 / 100 = 5.00 %; without agentic: 5 / 60 = 8.33 %
    assert r.overall == pytest.approx(5 / (100 - 20 - 20 / 3))
    assert "- ran: irrelevance 100.0 (2)" in text
    notsel = next(line for line in text.splitlines() if line.startswith("- not selected"))
    assert "memory_kv" in notsel and "memory_rec_sum" in notsel and "live_irrelevance" in notsel
    assert "- not run: web_search_base (not run: not runnable offline: needs SerpAPI" in text
    assert "- not run: memory_vector (" in text
    assert "- headline 6.82 = the official weights renormalised over the 73.3 % of BFCL-v4 that runs offline" in text
    assert "(categories that did not run count 0): 5.00; without any agentic category (renormalised over 60 %): 8.33" \
        in text
    assert "- task errors: bfcl: no task errored (2 task runs)" in text
    d = report_dict([r])["benchmarks"]["bfcl"]
    assert d["categories_run"] == ["irrelevance"] and "memory_vector" in d["categories_not_run"]
