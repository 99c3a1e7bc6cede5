"""What a run reports about itself: the summary line's endings and judge verdicts, the verdict that fails
a run which measured nothing, the compact table, the progress bar, and the VitaBench checkout check.
Records are written by hand; every expected value is worked out in the test."""

from __future__ import annotations

import io

import pytest

from envace.benchmarks.base import BenchmarkResult, CategoryScore
from envace.benchmarks.errors import summarize, summary_line, termination_of
from envace.benchmarks.progress import Progress, track
from envace.evaluation.verdict import benchmark_failure, run_failures, summary_table


def _err(stage, typ, message):
    return {"stage": stage, "type": typ, "message": message}


def _result(name, records, categories=None, overall=None):
    r = BenchmarkResult(benchmark=name, categories=categories or {}, groups={}, overall=overall,
                        overall_definition="", departures=[], models={}, records=records)
    r.note_task_errors()
    return r


CONTEXT = _err("policy", "ContextLengthExceeded", "this model's maximum context length is 8 tokens; the prompt has 30")


def test_context_errors_user_errors_and_max_steps_are_named_in_the_summary_line():
    records = [{"id": "a", "termination": "user_stop", "task_error": None},
               {"id": "b", "termination": "user_error", "task_error": None},
               {"id": "c", "termination": "user_error", "task_error": None},
               {"id": "d", "termination": "max_steps", "task_error": None},
               {"id": "e", "termination": "task_error", "task_error": CONTEXT}]
    assert [termination_of(r) for r in records] == ["user_stop", "user_error", "user_error", "max_steps", "context"]
    s = summarize(records)
    assert s["terminations"] == {"user_stop": 1, "user_error": 2, "max_steps": 1, "context": 1}
    assert summary_line("tau2", s) == (
        "tau2: 1 of 5 task runs errored and score 0: policy: ContextLengthExceeded x1 (e.g. e: this model's maximum "
        "context length is 8 tokens; the prompt has 30); ended user_error x2, context x1, max_steps x1")
    # an endpoint's 400 for an over-long prompt is a context ending too
    served = {"id": "f", "task_error": _err("policy", "ChatClientError", "HTTP 400: This model's maximum context "
                                            "length is 4096 tokens")}
    assert termination_of(served) == "context"


def test_unparsed_judge_verdicts_are_counted_and_named():
    records = [{"id": "a", "termination": "user_stop", "n_windows": 3, "unparsed_windows": 0, "task_error": None},
               {"id": "b", "termination": "user_stop", "n_windows": 2, "unparsed_windows": 2, "task_error": None},
               {"id": "c", "termination": "user_error", "n_windows": 0, "unparsed_windows": 0, "task_error": None},
               {"id": "d", "termination": "task_error", "n_windows": 0,
                "task_error": _err("evaluator", "ChatClientError", "judge down")}]
    s = summarize(records)
    # runs that reached the judge: a, b (windows judged) and d (it raised); c ended before judging
    assert s["judge"] == {"windows": 5, "unparsed": 2, "runs": 3, "failed": 2}
    assert summary_line("vita", s).endswith("; ended user_error x1; judge: 2 of 5 windows unparsed, failed on 2 of 3 "
                                            "judged runs")


def test_a_benchmark_whose_runs_all_failed_fails_the_run_with_the_causes_grouped():
    down = _err("policy", "ChatClientError", "connection refused")
    r = _result("tau2", [{"id": "1", "termination": "task_error", "task_error": down},
                         {"id": "2", "termination": "task_error", "task_error": down},
                         {"id": "4", "termination": "task_error", "task_error": CONTEXT}])
    line = benchmark_failure(r, 0.1)
    assert line == ("tau2: all 3 task runs failed before a score was measured: policy: ChatClientError x2, "
                    "ended context x1 (e.g. 1: connection refused)")
    # one run that ended as the benchmark defines it (even user_error, reward 0) is a measured score
    ok = _result("tau2", [*r.records, {"id": "5", "termination": "user_error", "task_error": None, "reward": 0.0}])
    assert benchmark_failure(ok, 0.1) is None and ok.error_summary().endswith("; ended context x1, user_error x1")
    assert run_failures({"tau2": r, "x": ok}, 0.1) == [line]


def test_a_judge_failing_on_more_than_the_allowed_share_fails_the_run():
    rec = [{"id": str(i), "termination": "user_stop", "n_windows": 1, "unparsed_windows": int(i < 2),
            "task_error": None} for i in range(10)]
    r = _result("vita", rec)
    assert benchmark_failure(r, 0.2) is None  # 2 of 10 = 20 %: not more than the share
    assert benchmark_failure(r, 0.1) == ("vita: the judge failed on 2 of 10 judged runs (20% > "
                                         "max_judge_failure_share=0.1): 0 raised, 2 of 10 windows unparsed")


def test_the_table_has_one_row_per_headline_metric():
    cats = {"airline": CategoryScore("airline", 0.25, 1, 4, 2), "retail": CategoryScore("retail", 0.5, 2, 4, 2)}
    down = _err("policy", "ChatClientError", "x")
    recs = ([{"id": "a", "category": "airline", "task_error": None}] * 3
            + [{"id": "b", "category": "airline", "task_error": down}]
            + [{"id": "c", "category": "retail", "task_error": None}] * 4)
    tau2 = _result("tau2", recs, cats, overall=0.375)
    fin = BenchmarkResult(benchmark="finmcp", categories={}, groups={"TF1_macro": 0.5, "TP_macro": 1.0, "EMR": None},
                          overall=0.5, overall_definition="", departures=[], models={},
                          records=[{"id": "f", "task_error": None}] * 2)
    table = summary_table({"benchmarks": {"results": {"tau2": tau2, "finmcp": fin}}})
    assert table.splitlines() == [
        "benchmark  metric      value  n  errors",
        "tau2       overall     37.50  8       1",
        "           airline     25.00  4       1",
        "           retail      50.00  4       0",
        "finmcp     TF1_macro   50.00  2       0",
        "           TP_macro   100.00",
        "           EMR             —"]


def test_progress_lines_in_a_log_show_done_total_errors_and_eta():
    now = [0.0]
    out = io.StringIO()
    bar = Progress("bfcl", out, tty=False, every_s=30, clock=lambda: now[0])
    bar.add_total(4)
    now[0] = 10.0
    bar.advance()
    now[0] = 40.0
    bar.advance(error=True)  # 30 s after the first line: a new line; 2 done in 40 s, 2 left -> ETA 40 s
    now[0] = 41.0
    bar.advance()  # within 30 s of the last line: no line
    bar.add_total(2)  # a second category: the total grows (no line: the run has started)
    now[0] = 90.0
    bar.advance()  # 50 s after the last line: 4 done in 90 s, 2 left -> ETA 45 s
    bar.advance()
    bar.advance()
    bar.close()
    assert out.getvalue().splitlines() == [
        "bfcl    [........................] 0/4 task runs, 0 errors, ETA ?",
        "bfcl    [############............] 2/4 task runs, 1 errors, ETA 40s",
        "bfcl    [################........] 4/6 task runs, 1 errors, ETA 45s",
        "bfcl    [########################] 6/6 task runs, 1 errors, took 1m30s"]


def test_a_terminal_bar_redraws_in_place():
    out = io.StringIO()
    with track("tau2", out, tty=True, clock=lambda: 0.0) as bar:
        bar.add_total(2)
        bar.advance()
    text = out.getvalue()
    assert text.count("\r") == 3 and text.count("\n") == 1  # two redraws, then the final state on its line
    assert text.endswith("\rtau2    [############............] 1/2 task runs, 0 errors, ETA 0s\n")


@pytest.mark.parametrize("layout, fixed", [("empty", False), ("nested", True), ("checkout", None)])
def test_a_folder_that_is_no_vitabench_checkout_is_said_once(tmp_path, layout, fixed):
    from envace.benchmarks.run import requirement_problems

    if layout == "nested":  # the folder that holds the clone
        (tmp_path / "vitabench" / "src" / "vita").mkdir(parents=True)
    if layout == "checkout":
        (tmp_path / "src" / "vita").mkdir(parents=True)
        (tmp_path / "data" / "vita" / "domains").mkdir(parents=True)
    problems = requirement_problems(["vita"], {"vita": str(tmp_path)}, True)
    if fixed is None:
        assert problems == []
        return
    assert len(problems) == 1 and problems[0].field == "paths.vita"
    assert problems[0].what == f"{tmp_path} is not a VitaBench checkout"
    assert "src/vita/" in problems[0].fix and "data/vita/domains/<set>/tasks_en.json" in problems[0].fix
    assert ("did you mean paths.vita=" + str(tmp_path / "vitabench")) in problems[0].fix if fixed else True
