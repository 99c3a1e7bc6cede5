"""The adapter folder contract, followed by a toy benchmark (tests/benchmarks/fixtures/toybench): registered
by importing it, run through `envace.benchmarks.run`, and its transitions recorded by `worldbench build`.

Expected values are worked by hand from the three tasks below (the counter starts at `start`, the gold call
adds `target - start`, a value outside 0..100 or a call without `n` is refused).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from envace.benchmarks import base
from envace.benchmarks.run import run_benchmarks
from envace.engines.reply import AssistantReply
from envace.types import ToolCall
from envace.worldbench.build import build, source_dirs
from envace.worldbench.config import BuildConfig
from envace.worldbench.records import CallKind, Source, read_transitions

FIXTURES = Path(__file__).parent / "fixtures"
TASKS = [{"id": "t1", "start": 2, "target": 5}, {"id": "t2", "start": 10, "target": 4},
         {"id": "t3", "start": 0, "target": 7}]


def test_every_builtin_adapter_holds_the_contract_files():
    root = Path(base.__file__).parent
    for name in ("bfcl", "tau2", "vita", "finmcp"):
        missing = [f for f in base.ADAPTER_FILES if not (root / name / f).is_file()]
        assert not missing, f"envace/benchmarks/{name} lacks {missing}"
        assert base.BENCHMARKS.info(name)["transitions"] == f"envace.benchmarks.{name}.transitions:replay_tasks"
    assert sorted(p.name for p in (FIXTURES / "toybench").glob("*.py")) == sorted(base.ADAPTER_FILES)


@pytest.fixture
def toy(tmp_path, monkeypatch):
    """The toy package imported (which registers it); unregistered and forgotten afterwards."""
    data = tmp_path / "toy_tasks.json"
    data.write_text(json.dumps(TASKS))
    monkeypatch.syspath_prepend(str(FIXTURES))
    assert "toy" not in base.available_benchmarks() and Source.__members__.get("TOY") is None
    import toybench  # noqa: F401 - registers "toy"
    yield data
    base.BENCHMARKS.remove("toy")
    Source._value2member_map_.pop("toy", None)
    for mod in [m for m in sys.modules if m == "toybench" or m.startswith("toybench.")]:
        del sys.modules[mod]


class AddThree:
    """Always adds 3 once: by hand, only t1 (2 -> 5) ends at its target."""

    name = "add-three"

    def reply(self, messages, tools, *, seed=None, context=None):
        if (context or {}).get("step", 0) > 0:
            return AssistantReply(content="Done.")
        return AssistantReply(tool_calls=[ToolCall("add", {"n": 3})], finish_reason="tool_calls")


def test_toy_runs_through_run_benchmarks(toy):
    from toybench.data import load_tasks
    from toybench.gold import ToyGoldPolicy

    assert "toy" in base.available_benchmarks()
    options = {"toy": {"data_path": str(toy)}}
    gold = run_benchmarks(["toy"], ToyGoldPolicy(load_tasks(toy)), limit=None, k=2, seed=0, options=options)
    r = gold["results"]["toy"]
    assert r.overall == 1.0 and r.categories["counter"].total == 6 and [x["final"] for x in r.records[:3]] == [5, 4, 7]
    r = run_benchmarks(["toy"], AddThree(), limit=None, k=1, seed=0, options=options)["results"]["toy"]
    assert r.overall == pytest.approx(1 / 3) and [x["final"] for x in r.records] == [5, 13, 3]
    r = run_benchmarks(["toy"], AddThree(), limit=2, k=1, seed=0, options=options)["results"]["toy"]
    assert r.overall == pytest.approx(1 / 2) and len(r.records) == 2


def test_toy_transitions_are_recorded_by_worldbench_build(toy, tmp_path):
    out = tmp_path / "wb"
    cfg = BuildConfig(out=str(out), sources=["toy"], benchmark_options={"toy": {"data_path": str(toy)}})
    manifest = build(cfg)
    assert set(source_dirs(out)) == {Source("toy")}
    rows = [t for split in ("train", "test") for t in read_transitions(out / "toy" / f"{split}.jsonl")]
    by = {(t.task_id, t.kind): t for t in rows}
    # per task: the gold call, -999 (out of range: refused) and the call without n (refused); no id argument
    assert len(rows) == 9 and {k for _, k in by} == {CallKind.GOLD, CallKind.OUT_OF_RANGE, CallKind.MISSING_ARG}
    for task, value in (("t1", 5), ("t2", 4), ("t3", 7)):
        g = by[(task, CallKind.GOLD)]
        assert (g.source.value, g.domain, g.response, g.is_error) == ("toy", "counter", json.dumps({"value": value}),
                                                                      False)
        assert g.history == [{"role": "user", "content": f"Bring the counter from {TASKS[int(task[1]) - 1]['start']} "
                                                         f"to {value}."}]
        start = TASKS[int(task[1]) - 1]["start"]
        assert by[(task, CallKind.OUT_OF_RANGE)].response == json.dumps(
            {"error": f"value would be {start - 999}, outside 0..100"})
        assert by[(task, CallKind.MISSING_ARG)].is_error and by[(task, CallKind.MISSING_ARG)].call["arguments"] == {}
    counts = manifest["sources"]["toy"]["counts"]
    assert counts["train"]["n"] + counts["test"]["n"] == 9
    assert counts["train"]["errors"] + counts["test"]["errors"] == 6


def test_a_benchmark_without_transitions_is_no_source(toy):
    base.register_benchmark("toy_no_wm", lambda **kw: None)
    try:
        with pytest.raises(ValueError, match="toy_no_wm"):
            BuildConfig(sources=["toy_no_wm"])
        from envace.benchmarks.transitions import replay_function

        with pytest.raises(ValueError, match="registers no transitions"):
            replay_function("toy_no_wm")
    finally:
        base.BENCHMARKS.remove("toy_no_wm")
