"""Benchmark records are plain JSON and task errors are typed: `jsonable`, the `BenchmarkResult` round
trip through a file read back with `json.load`, the error summary by cause (hand-counted), and the stage
an exception is attributed to."""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

import numpy as np
import pytest

from envace.benchmarks.base import BenchmarkResult, CategoryScore, jsonable
from envace.benchmarks.errors import (
    StagedPolicy,
    StageTracker,
    TaskError,
    TaskStage,
    failed_record,
    summarize,
    summary_line,
)
from envace.engines.reply import AssistantReply


class Colour(Enum):
    RED = "red"


@dataclass
class Point:
    x: int
    where: Path


def _result() -> BenchmarkResult:
    err = TaskError.of(TaskStage.EVALUATOR, ValueError("Task task_404 not found"))
    records = [{"id": "a", "category": "c", "sample": 0, "seed": 3, "reward": 1.0, "valid": True, "task_error": None,
                "messages": [{"role": "user", "content": "hi"}], "pair": (1, 2)},
               failed_record("b", "c", 0, 3, err, [{"role": "user", "content": "ho"}])]
    return BenchmarkResult("tau2", {"c": CategoryScore("c", 0.5, 1, 2, 2)}, {"avg": 0.5}, 0.5, "mean", [],
                           {"policy": "p", "user_simulator": "u", "judge": None}, k=1, seed=3, records=records,
                           meta={"path": Path("/x/y"), "colour": Colour.RED, "arr": np.arange(3), "f": np.float32(0.5)})


def test_jsonable_converts_nested_values_and_strict_names_the_place():
    got = jsonable({"p": Point(1, Path("/a")), "t": (1, {2}), 3: Colour.RED, "n": np.int64(7)})
    assert got == {"p": {"x": 1, "where": "/a"}, "t": [1, [2]], "3": "red", "n": 7}
    with pytest.raises(TypeError, match=r"\$\.deep\[1\]: a object is not JSON data"):
        jsonable({"deep": [1, object()]}, strict=True)
    assert jsonable(object()).startswith("<object object")  # lenient: str, only for unknown leaves


def test_result_round_trips_through_a_json_file(tmp_path):
    r = _result()
    r.note_task_errors()
    path = r.save(tmp_path / "r.json")
    with path.open() as f:
        raw = json.load(f)  # plain JSON: a list of record objects, not a repr string
    assert isinstance(raw["records"], list) and raw["records"][1]["task_error"] == {
        "stage": "evaluator", "type": "ValueError", "message": "Task task_404 not found"}
    assert raw["records"][0]["pair"] == [1, 2] and raw["meta"]["arr"] == [0, 1, 2] and raw["meta"]["colour"] == "red"
    back = BenchmarkResult.load(path)
    assert back.to_dict() == raw and back.categories["c"] == CategoryScore("c", 0.5, 1, 2, 2)
    assert jsonable(r.to_dict(), strict=True) == raw


def test_error_summary_counts_by_cause():
    mk = lambda i, stage, exc: failed_record(f"t{i}", "c", 0, 0, TaskError.of(stage, exc))  # noqa: E731
    recs = [mk(0, TaskStage.EVALUATOR, ValueError("v0")), {"id": "ok", "task_error": None},
            mk(1, TaskStage.ENVIRONMENT, KeyError("k")), mk(2, TaskStage.EVALUATOR, ValueError("v2"))]
    s = summarize(recs)
    assert s == {"count": 3, "total": 4, "by_cause": {"evaluator: ValueError": 2, "environment: KeyError": 1},
                 "examples": {"evaluator: ValueError": "t0: v0", "environment: KeyError": "t1: 'k'"},
                 "terminations": {"task_error": 3}, "judge": None}
    assert summary_line("x", s) == ("x: 3 of 4 task runs errored and score 0: evaluator: ValueError x2 (e.g. t0: v0); "
                                    "environment: KeyError x1 (e.g. t1: 'k')")
    assert summary_line("x", summarize([{"id": "ok"}])) == "x: no task errored (1 task runs)"


def test_a_policy_exception_is_attributed_to_the_policy_stage():
    class Boom:
        name = "boom"
        extra = 5

        def __init__(self):
            self.n = 0

        def reply(self, messages, tools, *, seed=None, context=None):
            self.n += 1
            if self.n == 2:
                raise ConnectionError("server gone")
            return AssistantReply(content="ok")

    tracker = StageTracker(TaskStage.ENVIRONMENT)
    p = StagedPolicy(Boom(), tracker)
    assert p.reply([], []).content == "ok" and tracker.stage is TaskStage.ENVIRONMENT  # restored after a call
    assert p.name == "boom" and p.extra == 5
    with pytest.raises(ConnectionError):
        p.reply([], [])
    assert tracker.error(ConnectionError("server gone")).cause == "policy: ConnectionError"
