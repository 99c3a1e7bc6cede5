"""The oracle replay of FinMCP-Bench: a `BenchPolicy` that answers each (record, user turn, step) of the
teacher-forced loop with the ground truth's own assistant message at that point, tool calls included.
Through the replay server and the metric it must score TP = TR = TF1 = 1 and exact match on every
record: it proves that the records, the replay of recorded tool results and the name-multiset metric
agree with the data, not anything about a model.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from envace.benchmarks.base import GoldOutcome
from envace.benchmarks.finmcp.data import FinMCPRecord, load_records
from envace.engines.reply import AssistantReply
from envace.types import ToolCall


def _arguments(raw: Any) -> dict[str, Any]:
    if isinstance(raw, Mapping):
        return dict(raw)
    try:
        value = json.loads(raw) if isinstance(raw, str) and raw.strip() else {}
    except json.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}


def gold_turns(record: FinMCPRecord) -> list[list[dict[str, Any]]]:
    """Per user turn, the ground truth's assistant messages up to the next user message."""
    turns: list[list[dict[str, Any]]] = []
    for m in record.messages:
        if m.get("role") == "user":
            turns.append([])
        elif m.get("role") == "assistant" and turns:
            turns[-1].append(m)
    return turns


class FinMCPGoldPolicy:
    name = "finmcp-gold"

    def __init__(self, records: Iterable[FinMCPRecord]) -> None:
        self.turns = {r.id: gold_turns(r) for r in records}

    def reply(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], *, seed: int | None = None,
              context: Mapping[str, Any] | None = None) -> AssistantReply:
        ctx = dict(context or {})
        turns = self.turns[str(ctx["entry_id"])]
        turn, step = int(ctx.get("turn", 0)), int(ctx.get("step", 0))
        said = turns[turn] if turn < len(turns) else []
        if step >= len(said):
            return AssistantReply(content="Done.")
        m = said[step]
        calls = [ToolCall(c["function"]["name"], _arguments(c["function"].get("arguments")))
                 for c in m.get("tool_calls") or []]
        content = m.get("content") if isinstance(m.get("content"), str) else ""
        return AssistantReply(content=content or ("" if calls else "Done."), tool_calls=calls,
                              finish_reason="tool_calls" if calls else "stop")


def gold_replay(options: Mapping[str, Any], paths: Mapping[str, str | None], limit: int | None,
                seed: int) -> GoldOutcome:
    """`FinMCPGoldPolicy` over the records of `paths.finmcp`; pass = exact match."""
    from envace.benchmarks.finmcp.benchmark import FinMCPBenchmark

    data = str(paths["finmcp"])
    records = load_records(data)[: limit if limit is not None else None]
    result = FinMCPBenchmark(data, paths.get("finmcp_tools")).run(FinMCPGoldPolicy(records), limit=limit, k=1,
                                                                  seed=seed)
    return GoldOutcome.of(result, source=data, note=f"TF1 macro {result.groups.get('TF1_macro')}")
