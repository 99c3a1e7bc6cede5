"""FinMCP-Bench on synthetic records in its format (the real data's licence forbids shipping it).

Three hand-written records; a scripted policy (test double) answers each (record, turn, step) with a
preset reply. Expected metrics are worked by hand in `test_metrics_by_hand`.
"""

from __future__ import annotations

import json

import pytest

from envace.benchmarks.finmcp.benchmark import FinMCPBenchmark
from envace.benchmarks.finmcp.data import FinMCPDataError, load_records, load_tool_schemas
from envace.benchmarks.finmcp.runner import MISS_PAYLOAD
from envace.engines.reply import AssistantReply
from envace.types import ToolCall


def _call(cid, name, **args):
    fn = {"name": name, "arguments": json.dumps(args, ensure_ascii=False)}
    return {"id": cid, "type": "function", "function": fn}


def _tool(cid, content):
    return {"role": "tool", "tool_call_id": cid, "content": json.dumps(content, ensure_ascii=False)}


RECORDS = [
    {"id": "r1", "scenery": "Market-News-Daily", "diff_level": {"turns": 1, "tool_number": 1, "level": "easy"},
     "task": "single tool", "tool_list": [["SearchNews"]], "question": "最近市场行情如何？", "answer": "...",
     "messages": [{"role": "user", "content": "最近市场行情如何？"},
                  {"role": "assistant", "content": "", "tool_calls": [_call("a", "SearchNews", keyword="市场")]},
                  _tool("a", {"news": ["up 1%"]}),
                  {"role": "assistant", "content": "The market rose 1%."}]},
    {"id": "r2", "scenery": "Fund-Info-Compare", "diff_level": {"level": "medium"}, "task": "multi tool",
     "messages": [{"role": "user", "content": "Compare funds 001 and 002 and the NAV of 001."},
                  {"role": "assistant", "content": "", "tool_calls": [_call("b1", "GetFund", code="001"),
                                                                      _call("b2", "GetFund", code="002")]},
                  _tool("b1", {"fund": "001", "risk": "low"}), _tool("b2", {"fund": "002", "risk": "high"}),
                  {"role": "assistant", "content": "", "tool_calls": [_call("b3", "GetNav", code="001")]},
                  _tool("b3", {"nav": 1.23}),
                  {"role": "assistant", "content": "001 is safer; NAV 1.23."}]},
    {"id": "r3", "scenery": "Fund-Nav-Trend", "diff_level": {"level": "hard"}, "task": "multi turn",
     "messages": [{"role": "system", "content": "You are a fund assistant."},
                  {"role": "user", "content": "Tell me about fund 003."},
                  {"role": "assistant", "content": "", "tool_calls": [_call("c1", "GetFund", code="003")]},
                  _tool("c1", {"fund": "003"}),
                  {"role": "assistant", "content": "003 is a bond fund."},
                  {"role": "user", "content": "And its NAV this week and last week?"},
                  {"role": "assistant", "content": "", "tool_calls": [_call("c2", "GetNav", code="003", week=0),
                                                                      _call("c3", "GetNav", code="003", week=-1)]},
                  _tool("c2", {"nav": 1.0}), _tool("c3", {"nav": 0.9}),
                  {"role": "assistant", "content": "Up from 0.9 to 1.0."}]},
]

# What the scripted model does, per (record, user turn, step).
SCRIPT = {
    ("r1", 0, 0): [ToolCall("SearchNews", {"keyword": "市场"})], ("r1", 0, 1): "Up 1%.",
    ("r2", 0, 0): [ToolCall("GetFund", {"code": "001"}), ToolCall("GetNav", {"code": "001"}),
                   ToolCall("GetRisk", {"code": "002"})], ("r2", 0, 1): "Done.",
    ("r3", 0, 0): "003 is a fund.",
    ("r3", 1, 0): [ToolCall("GetNav", {"code": "003", "week": 5})], ("r3", 1, 1): "NAV 1.0.",
}


class Scripted:
    name = "scripted"

    def __init__(self, fail_on: str | None = None):
        self.log: list[tuple[dict, list[dict]]] = []
        self.fail_on = fail_on

    def reply(self, messages, tools, *, seed=None, context=None):
        self.log.append((dict(context), [dict(m) for m in messages]))
        if context["entry_id"] == self.fail_on:
            raise ConnectionError("server down")
        out = SCRIPT[(context["entry_id"], context["turn"], context["step"])]
        return AssistantReply(content=out) if isinstance(out, str) else AssistantReply(tool_calls=list(out))


@pytest.fixture
def data_file(tmp_path):
    p = tmp_path / "benchmark_synthetic.json"
    p.write_text(json.dumps(RECORDS, ensure_ascii=False))
    return p


def test_metrics_by_hand(data_file):
    # r1: pred [SearchNews] vs gold [SearchNews]                 TP 1 FP 0 FN 0  P 1   R 1   F1 1    exact
    # r2: pred [GetFund, GetNav, GetRisk] vs [GetFund, GetFund, GetNav]
    #                                                             TP 2 FP 1 FN 1  P 2/3 R 2/3 F1 2/3
    # r3: pred [GetNav] vs gold [GetFund, GetNav, GetNav]         TP 1 FP 0 FN 2  P 1   R 1/3 F1 1/2
    # macro: P (1 + 2/3 + 1)/3 = 8/9, R (1 + 2/3 + 1/3)/3 = 2/3, F1 (1 + 2/3 + 1/2)/3 = 13/18
    # micro: TP 4 FP 1 FN 3 -> P 4/5, R 4/7, F1 2*(4/5)(4/7)/(4/5 + 4/7) = 2/3;  EMR 1/3
    res = FinMCPBenchmark(data_file).run(Scripted())
    assert res.groups == pytest.approx({"TP_macro": 8 / 9, "TR_macro": 2 / 3, "TF1_macro": 13 / 18,
                                        "TP_micro": 4 / 5, "TR_micro": 4 / 7, "TF1_micro": 2 / 3, "EMR": 1 / 3})
    assert res.overall == pytest.approx(13 / 18)
    # by L1 scenario: Market = r1; Fund = r2, r3 (macro F1 (2/3 + 1/2)/2 = 7/12)
    assert {c: s.accuracy for c, s in res.categories.items()} == pytest.approx({"Market": 1.0, "Fund": 7 / 12})
    assert res.meta["by_task"]["multi_turn"]["TR_micro"] == pytest.approx(1 / 3)
    assert [(r["tp"], r["fp"], r["fn"]) for r in res.records] == [(1, 0, 0), (2, 1, 1), (1, 0, 2)]
    assert any("synthesised" in d for d in res.departures)


def test_replay_server_and_teacher_forcing(data_file):
    pol = Scripted()
    res = FinMCPBenchmark(data_file).run(pol)
    ctx, msgs = next((c, m) for c, m in pol.log if (c["entry_id"], c["step"]) == ("r2", 1))
    tool_msgs = [m for m in msgs if m["role"] == "tool"]
    # GetFund(001): exact recorded answer; GetNav(001): exact; GetRisk: not recorded -> error payload
    assert [json.loads(m["content"]) for m in tool_msgs] == \
        [{"fund": "001", "risk": "low"}, {"nav": 1.23}, MISS_PAYLOAD]
    # r3 turn 2 sees the GROUND TRUTH of turn 1 (the gold GetFund call), not the model's turn-1 answer
    ctx, msgs = next((c, m) for c, m in pol.log if (c["entry_id"], c["turn"], c["step"]) == ("r3", 1, 0))
    assert msgs == RECORDS[2]["messages"][:6]
    # r3 turn 2: GetNav with other arguments -> the first unused recorded GetNav result (name match)
    ctx, msgs = next((c, m) for c, m in pol.log if (c["entry_id"], c["turn"], c["step"]) == ("r3", 1, 1))
    assert json.loads(msgs[-1]["content"]) == {"nav": 1.0}
    assert res.meta["replay"] == {"exact": 3, "name": 1, "miss": 1}


def test_schema_file_and_transport_errors(data_file, tmp_path):
    schema = tmp_path / "mcp_schema.json"
    schema.write_text(json.dumps([{"name": "GetFund", "description": "fund info", "inputSchema": {
        "type": "object", "properties": {"code": {"type": "string"}}}},
        {"type": "function", "function": {"name": "GetNav", "parameters": {"type": "object", "properties": {}}}}]))
    assert [t["function"]["name"] for t in load_tool_schemas(schema)] == ["GetFund", "GetNav"]
    res = FinMCPBenchmark(data_file, schema).run(Scripted(fail_on="r2"), k=2)
    assert res.meta["errors"] == 2 and sum(r["task_error"] is not None for r in res.records) == 2
    err = next(r for r in res.records if r["task_error"])
    assert err["task_error"] == {"stage": "policy", "type": "ConnectionError", "message": "server down"}
    # r2 errored: a failure (no tool predicted: TP 0 FP 0 FN 3, F1 0); r1 F1 1, r3 F1 1/2; twice each
    # -> macro F1 (1 + 0 + 1/2) / 3 = 1/2 (dropping r2, as the official evaluation does, would give 3/4)
    assert res.overall == pytest.approx(0.5) and res.groups["TR_micro"] == pytest.approx(2 * 2 / (2 * 7))
    assert res.meta["task_errors"]["by_cause"] == {"policy: ConnectionError": 2}
    assert not any("synthesised" in d for d in res.departures)


def test_bad_records_name_record_and_field(tmp_path):
    bad = dict(RECORDS[0])
    del bad["scenery"]
    p = tmp_path / "bad.json"
    p.write_text(json.dumps([RECORDS[1], bad]))
    with pytest.raises(FinMCPDataError, match=r"record 1 \(id r1\): field 'scenery'"):
        load_records(p)
    with pytest.raises(FinMCPDataError, match="no such file"):
        load_records(tmp_path / "missing.json")


def test_finmcp_gold_replay_scores_one(tmp_path):
    import json

    from envace.benchmarks.gold import run_gold

    data = tmp_path / "fin.json"
    data.write_text(json.dumps(RECORDS, ensure_ascii=False))
    (outcome,) = run_gold(["finmcp"], paths={"finmcp": str(data)}, options={})
    assert (outcome.passed, outcome.total, outcome.ok) == (3, 3, True)
    assert outcome.result.groups["TF1_macro"] == 1.0 and outcome.result.groups["EMR"] == 1.0
    # every gold call finds its recorded result: r1 one call, r2 three, r3 one + two
    assert outcome.result.meta["replay"] == {"exact": 7, "name": 0, "miss": 0}


def test_finmcp_transitions_replay_the_recorded_results(data_file, tmp_path):
    from envace.worldbench.build import build
    from envace.worldbench.config import BuildConfig
    from envace.worldbench.records import CallKind, read_transitions

    out = tmp_path / "wb"
    build(BuildConfig(out=str(out), sources=["finmcp"], benchmark_options={"finmcp": {"data_path": str(data_file)}}))
    rows = [t for s in ("train", "test") for t in read_transitions(out / "finmcp" / f"{s}.jsonl")]
    gold = {(t.task_id, t.position): t for t in rows if t.kind is CallKind.GOLD}
    # by hand from RECORDS: r1 one call, r2 three, r3 three; each answered with its own recorded result
    assert sorted(gold) == [("r1", 0), ("r2", 0), ("r2", 1), ("r2", 2), ("r3", 0), ("r3", 1), ("r3", 2)]
    assert [gold[("r3", i)].response for i in range(3)] == ['{"fund": "003"}', '{"nav": 1.0}', '{"nav": 0.9}']
    assert gold[("r2", 1)].call == {"name": "GetFund", "arguments": {"code": "002"}}
    assert not any(t.is_error for t in gold.values()) and {t.domain for t in rows} == {"Market", "Fund"}
    # r3's second turn: system opening, the first turn (user, call, reply), then the second user message
    h = gold[("r3", 1)].history
    assert [m["role"] for m in h] == ["system", "user", "assistant", "tool", "assistant", "user"]
    assert h[0]["content"] == "You are a fund assistant." and h[3]["content"] == '{"fund": "003"}'
    # the only perturbation that applies is r3's numeric `week` made -999, answered by name from the recordings
    (p,) = [t for t in rows if t.kind is not CallKind.GOLD]
    assert (p.task_id, p.kind, p.call["arguments"]["week"]) == ("r3", CallKind.OUT_OF_RANGE, -999)
    assert p.response in ('{"nav": 1.0}', '{"nav": 0.9}') and not p.is_error
