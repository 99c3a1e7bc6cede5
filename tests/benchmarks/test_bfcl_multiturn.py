"""BFCL multi-turn entries executed through BFCL's backend classes and judged by its multi-turn checker:
gold calls pass, the 20-step limit force-quits, miss_func docs arrive at their turn with BFCL's message,
a dropped write fails the state check, and backend instances are released after scoring."""

from __future__ import annotations

import pytest

from envace.benchmarks.bfcl.benchmark import run_entry
from envace.benchmarks.bfcl.data import load_category
from envace.benchmarks.bfcl.gold import BFCLGoldPolicy
from envace.benchmarks.bfcl.runner import make_handler, position
from envace.engines.reply import AssistantReply
from envace.types import ToolCall

pytestmark = pytest.mark.usefixtures("bfcl_modules")


class Recorder:
    """Wraps a policy and records what each query saw."""

    name = "recorder"

    def __init__(self, inner):
        self.inner, self.seen = inner, []

    def reply(self, messages, tools, *, seed=None, context=None):
        self.seen.append({"messages": messages, "tools": [t["function"]["name"] for t in tools],
                          "context": dict(context), "seed": seed})
        return self.inner.reply(messages, tools, seed=seed, context=context)


def test_gold_multi_turn_entry_passes_bfcl_checker():
    entry = load_category("multi_turn_base", 1)[0]
    policy = Recorder(BFCLGoldPolicy([entry]))
    record = run_entry(make_handler(policy, "envace_test_mt0_s0"), entry)
    assert record["valid"] and record["error_type"] is None
    # per turn: one query answered with all the turn's gold calls, then one text reply that ends the turn
    expected = sum(2 if gold else 1 for gold in entry.ground_truth)
    assert record["queries"] == expected == len(policy.seen)
    first = policy.seen[0]
    assert first["context"] == {"benchmark": "bfcl", "entry_id": entry.id, "category": "multi_turn_base",
                                "sample": 0, "turn": 0, "step": 0}
    second = policy.seen[1]["messages"]  # the gold calls' BFCL execution results came back as tool messages
    tool_msgs = [m for m in second if m["role"] == "tool"]
    assert len(tool_msgs) == len(entry.ground_truth[0])
    assert [m["tool_call_id"] for m in tool_msgs] == [c["id"] for c in second[-len(tool_msgs) - 1]["tool_calls"]]
    assert policy.seen[0]["seed"] != policy.seen[1]["seed"]


def test_dropped_call_fails_the_state_check():
    entry = load_category("multi_turn_base", 1)[0]  # turn 0: cd, mkdir, mv (writes)
    record = run_entry(make_handler(BFCLGoldPolicy([entry], perturb=True), "envace_test_mt1_s0"), entry)
    assert not record["valid"]
    assert record["error_type"] == "multi_turn:instance_state_mismatch"


class Looper:
    """Calls a harmless read-only tool forever."""

    name = "looper"

    def reply(self, messages, tools, *, seed=None, context=None):
        name = "pwd" if "pwd" in [t["function"]["name"] for t in tools] else tools[0]["function"]["name"]
        return AssistantReply(tool_calls=[ToolCall(name, {}, id=f"c{len(messages)}")])


def test_twenty_step_limit_force_quits(bfcl_modules):
    limit = bfcl_modules.default_prompts.MAXIMUM_STEP_LIMIT
    assert limit == 20
    entry = next(e for e in load_category("multi_turn_base", 10) if "GorillaFileSystem" in e.prompt["involved_classes"])
    record = run_entry(make_handler(Looper(), "envace_test_mt2_s0"), entry)
    # BFCL counts a step after each execution and quits once the count exceeds the limit: 21 queries,
    # all in turn 0, and the truncated result fails as force-terminated
    assert record["queries"] == limit + 1
    assert len(record["result"]) == 1 and len(record["result"][0]) == limit + 1
    assert not record["valid"] and record["error_type"] == "multi_turn:force_terminated"


def test_miss_func_injects_held_back_docs_at_their_turn(bfcl_modules):
    entry = load_category("multi_turn_miss_func", 1)[0]
    (turn_key, held), = entry.prompt["missed_function"].items()
    held_names = {f["name"] for f in held}
    policy = Recorder(BFCLGoldPolicy([entry]))
    record = run_entry(make_handler(policy, "envace_test_mt3_s0"), entry)
    assert record["valid"]
    turn = int(turn_key)
    before = [s for s in policy.seen if s["context"]["turn"] < turn]
    at = [s for s in policy.seen if s["context"]["turn"] == turn]
    assert before and at
    assert all(not held_names & set(s["tools"]) for s in before)
    assert all(held_names <= set(s["tools"]) for s in at)
    last_user = [m for m in at[0]["messages"] if m["role"] == "user"][-1]["content"]
    assert last_user == bfcl_modules.default_prompts.DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_FC
    assert entry.ground_truth[turn - 1] == []  # the turn before: the model cannot do it yet


def test_backend_instances_are_released(bfcl_modules):
    g = vars(bfcl_modules.multi_turn_utils)
    entry = load_category("multi_turn_long_context", 1)[0]
    handler = make_handler(BFCLGoldPolicy([entry]), "envace_test_mt4_s0")
    record = run_entry(handler, entry)
    assert record["valid"]
    assert not [k for k in g if k.startswith("envace_test_mt4_s0_")]


def test_position_counts_turns_and_steps():
    msgs = [{"role": "system"}, {"role": "user"}, {"role": "assistant"}, {"role": "tool"}, {"role": "assistant"},
            {"role": "user"}]
    assert position(msgs) == (1, 0)
    assert position(msgs[:5]) == (0, 2)
    with pytest.raises(ValueError, match="tag"):
        make_handler(Looper(), "bad-tag")


class Attacker:
    """Emits calls that would run arbitrary Python if BFCL eval'd them."""

    name = "attacker"

    def __init__(self, target):
        self.target = target

    def reply(self, messages, tools, *, seed=None, context=None):
        if context["step"] > 0:
            return AssistantReply(content="done")
        if context["turn"] == 0:
            return AssistantReply(tool_calls=[ToolCall("open", {"file": self.target, "mode": "w"}, id="a")])
        return AssistantReply(tool_calls=[ToolCall("ls", {"a=True,b": 1}, id="b")])


def test_unsafe_calls_are_never_executed(tmp_path):
    from envace.benchmarks.bfcl.runner import unsafe_call

    target = tmp_path / "pwned.txt"
    entry = next(e for e in load_category("multi_turn_base", 10) if "GorillaFileSystem" in e.prompt["involved_classes"])
    record = run_entry(make_handler(Attacker(str(target)), "envace_test_mt5_s0"), entry)
    assert not target.exists()
    assert not record["valid"] and record["queries"] == len(entry.ground_truth)  # each refusal ends the turn
    names = {d["name"] for d in entry.prompt["function"]}
    assert unsafe_call([{"open": "{}"}], names) and unsafe_call([{"ls": '{"a=1,b": 2}'}], names)
    assert unsafe_call([{"os.system": "{}"}], names)
    assert unsafe_call([{"ls": '{"a": true}'}, {"cd": '{"folder": "x"}'}], names) is None
    assert unsafe_call([{"not_a_tool": "{}"}], names) is None  # BFCL reports its own NameError


def test_checker_exception_scores_zero_without_stopping_the_run(monkeypatch):
    import envace.benchmarks.bfcl.benchmark as bench

    entries = load_category("irrelevance", 2)
    real = bench.score_entry
    calls = []

    def flaky(handler, entry, result, name):
        calls.append(entry.id)
        if entry.id == entries[0].id:
            raise KeyError("boom")
        return real(handler, entry, result, name)

    monkeypatch.setattr(bench, "score_entry", flaky)
    res = bench.BFCLBenchmark(["irrelevance"]).run(BFCLGoldPolicy(entries), limit=2)
    assert calls == [e.id for e in entries]
    assert [r["valid"] for r in res.records] == [False, True]
    assert res.records[0]["error_type"] == bench.CHECKER_EXCEPTION and "boom" in res.records[0]["error"][0]
    assert res.meta["checker_exceptions"] == 1 and any("checker raised" in d for d in res.departures)
