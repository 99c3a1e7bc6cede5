"""The Overall report and `run_benchmarks` (the function `envace eval` calls).

Overall arithmetic is checked against the paper's own rows; `run_benchmarks` runs FinMCP-Bench on a
synthetic record with a scripted policy and with the real (random) tiny model behind `HFChatPolicy`,
with and without test-time rehearsal (plumbing, not quality).
"""

from __future__ import annotations

import json

import pytest
import torch

from envace.benchmarks.base import BenchmarkResult, CategoryScore
from envace.benchmarks.overall import overall_report
from envace.benchmarks.run import run_benchmarks
from envace.engines.reply import AssistantReply
from envace.tts.config import TTSConfig
from envace.types import ToolCall


def _result(name, overall, **models):
    return BenchmarkResult(benchmark=name, categories={"c": CategoryScore("c", overall, 1, 1, 1)},
                           groups={"TF1_macro": overall}, overall=overall, overall_definition=f"{name} headline",
                           departures=[f"{name} departs"], k=4,
                           models={"policy": "p", "user_simulator": models.get("user"), "judge": models.get("judge")})


def test_overall_is_the_mean_of_the_three_and_finmcp_is_apart():
    results = [_result("bfcl", 0.4604), _result("tau2", 0.367, user="qwen-235b"),
               _result("vita", 0.16, judge="qwen3-30b"),
               _result("finmcp", 0.4678)]
    rep = overall_report(results)
    assert rep["overall"] == pytest.approx((46.04 + 36.7 + 16.0) / 3)  # = the paper's EnvACE-8B 32.91 (rounded)
    assert round(rep["overall"], 2) == rep["paper"]["EnvACE-8B (paper)"]["overall"] == 32.91
    assert rep["paper"]["Qwen3-8B (paper)"] == {"bfcl": 44.04, "tau2": 30.0, "vita": 11.4, "overall": 28.48}
    assert rep["finmcp"]["TF1_macro"] == pytest.approx(46.78)
    assert rep["models"]["tau2"]["user_simulator"] == "qwen-235b" and rep["models"]["vita"]["judge"] == "qwen3-30b"
    assert rep["k"] == {"bfcl": 4, "tau2": 4, "vita": 4, "finmcp": 4}
    assert "tau2: tau2 departs" in rep["departures"] and "32.91" in rep["markdown"]
    partial = overall_report(results[:2])
    assert partial["overall"] is None and any("vita did not run" in d for d in partial["departures"])


RECORD = {"id": "s1", "scenery": "Market-News-Daily", "diff_level": {"level": "easy"}, "task": "single tool",
          "messages": [{"role": "user", "content": "How is the market?"},
                       {"role": "assistant", "content": "", "tool_calls": [
                           {"id": "a", "type": "function", "function": {"name": "SearchNews",
                                                                        "arguments": "{\"keyword\": \"market\"}"}}]},
                       {"role": "tool", "tool_call_id": "a", "content": "{\"news\": [\"up\"]}"},
                       {"role": "assistant", "content": "Up."}]}


@pytest.fixture
def fin_path(tmp_path):
    p = tmp_path / "fin.json"
    p.write_text(json.dumps([RECORD]))
    return p


class Searcher:
    """Scripted policy: searches once, then answers; in private rehearsal it also rehearses and reviews."""

    name = "searcher"
    temperature = 0.0

    def __init__(self):
        self.contexts = []

    def reply(self, messages, tools, *, seed=None, context=None):
        self.contexts.append(dict(context or {}))
        last = messages[-1]["content"] or ""
        if "Current tool to simulate:" in last:
            return AssistantReply(content='<execution_result>\n{"news": ["up"]}\n</execution_result>')
        if "Review of an imagined attempt." in last:
            return AssistantReply(content="Achieved: yes.")
        if "Write your rehearsal notes." in last:
            return AssistantReply(content="Search the news first.")
        if messages[-1]["role"] == "tool":
            return AssistantReply(content="The market is up.")
        return AssistantReply(tool_calls=[ToolCall("SearchNews", {"keyword": "market"})])


def test_run_benchmarks_with_and_without_tts(fin_path):
    plain = run_benchmarks(["finmcp"], Searcher(), limit=None, k=1, seed=0, paths={"finmcp": str(fin_path)})
    assert plain["results"]["finmcp"].overall == 1.0 and plain["tts"] is None
    pol = Searcher()
    out = run_benchmarks(["finmcp"], pol, limit=None, k=1, seed=0, tts=TTSConfig(n=3, mode="sequential"),
                         paths={"finmcp": str(fin_path)})
    res = out["results"]["finmcp"]
    assert res.overall == 1.0 and res.models["policy"] == "searcher + TTS(N=3, sequential)"
    private = [c for c in pol.contexts if c.get("tts") == "private"]
    assert private and all(c == private[0] for c in private)  # the private phase's context on every query
    (episodes,) = res.meta["tts"]["episodes"].values()
    assert episodes["memory"] == "Search the news first." and len(episodes["episodes"]) == 3  # N = 3 rehearsals
    assert any("test-time rehearsal: N=3" in d for d in res.departures)
    assert out["report"]["tts"]["n"] == 3 and out["report"]["overall"] is None  # FinMCP alone: no Overall


def test_missing_settings_are_reported_together():
    with pytest.raises(ValueError) as err:
        run_benchmarks(["vita", "finmcp"], Searcher(), limit=1, k=1, seed=0)
    # every problem at once, each naming its EvalConfig field
    assert "- paths.vita: vita needs paths.vita" in str(err.value) and "- judge: vita needs a judge" in str(err.value)
    assert "- paths.finmcp: finmcp needs paths.finmcp" in str(err.value)
    with pytest.raises(ValueError, match="valid names"):
        run_benchmarks(["mmlu"], Searcher(), limit=1, k=1, seed=0)


def test_tiny_model_runs_finmcp_with_tts(bench_tiny_dir, fin_path):
    from envace.engines.chat_model import HFChatPolicy, LocalChatModel

    torch.set_num_threads(1)
    policy = HFChatPolicy(LocalChatModel.from_dir(bench_tiny_dir, device="cpu"), temperature=0.0, max_tokens=12)
    for n, mode in ((0, "parallel"), (1, "parallel"), (1, "sequential")):
        out = run_benchmarks(["finmcp"], policy, limit=None, k=1, seed=0, tts=TTSConfig(n=n, mode=mode),
                             paths={"finmcp": str(fin_path)})
        res = out["results"]["finmcp"]
        assert 0.0 <= res.overall <= 1.0 and len(res.records) == 1
        if n > 0:
            (ep,) = res.meta["tts"]["episodes"].values()
            assert len(ep["episodes"]) == 1 and ep["n"] == 1
