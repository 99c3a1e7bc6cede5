"""The replay tool server and the teacher-forced multi-turn loop of FinMCP-Bench.

Officially every call goes to the live Qieman MCP server, which cannot be reached offline (nor from a
GPU machine). `ReplayToolServer` answers from the recorded ground truth of the same user turn instead:
1. a recorded call with the same name and the same arguments (canonical JSON) → its recorded result;
2. else a recorded call with the same name (the first one not yet answered, else the first) → its result;
3. else a fixed error payload. Each answer is tagged exact / name / miss in the stats.
The metric reads tool names only, but later calls depend on what the tools returned, so a model that
leaves the ground-truth path sees recorded or error results, not live ones: a departure.

Teacher forcing, as the official inference script: for each user turn i the history is the ground truth
up to and including that user message; the model continues (tool calls answered by the server) until a
reply has no tool call, or the calls so far exceed `max_tool_num` (20); the prediction keeps the ground
truth's system / user messages and the model's own continuations.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from envace.benchmarks.finmcp.data import FinMCPRecord
from envace.engines.reply import BenchPolicy
from envace.rollout.seeds import derive_seed
from envace.types import ToolCall

MISS_PAYLOAD = {"error": "replay server: no recorded response for this tool call in this turn"}


def _canon(args: Any) -> str:
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except json.JSONDecodeError:
            return args
    return json.dumps(args, sort_keys=True, ensure_ascii=False)


def turn_recordings(messages: list[dict[str, Any]], start: int) -> list[tuple[str, str, str]]:
    """(name, canonical arguments, result content) of the recorded calls answering the user message at
    `start` (up to the next user message). Results pair with calls by tool_call_id, else by position."""
    calls: list[tuple[str, str, str | None]] = []  # name, args, call id
    results: dict[str, str] = {}
    unnamed: list[str] = []
    for m in messages[start + 1:]:
        if m.get("role") == "user":
            break
        for c in m.get("tool_calls") or []:
            calls.append((c["function"]["name"], _canon(c["function"].get("arguments", {})), c.get("id")))
        if m.get("role") == "tool":
            content = m.get("content")
            text = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
            if m.get("tool_call_id"):
                results[str(m["tool_call_id"])] = text
            else:
                unnamed.append(text)
    out = []
    for name, args, cid in calls:
        if cid is not None and str(cid) in results:
            out.append((name, args, results[str(cid)]))
        elif unnamed:
            out.append((name, args, unnamed.pop(0)))
    return out


@dataclass
class ReplayToolServer:
    recordings: list[tuple[str, str, str]]
    used: set[int] = field(default_factory=set)
    stats: dict[str, int] = field(default_factory=lambda: {"exact": 0, "name": 0, "miss": 0})

    def answer(self, call: ToolCall) -> str:
        args = _canon(call.arguments)
        exact = [i for i, (n, a, _) in enumerate(self.recordings) if n == call.name and a == args]
        named = [i for i, (n, _, _) in enumerate(self.recordings) if n == call.name]
        for kind, pool in (("exact", exact), ("name", named)):
            if pool:
                fresh = [i for i in pool if i not in self.used]
                i = (fresh or pool)[0]
                self.used.add(i)
                self.stats[kind] += 1
                return self.recordings[i][2]
        self.stats["miss"] += 1
        return json.dumps(MISS_PAYLOAD, ensure_ascii=False)


@dataclass
class TeacherForced:
    messages_pred: list[dict[str, Any]]
    replay: dict[str, int]
    tool_calls: int
    queries: int


def teacher_forced(policy: BenchPolicy, record: FinMCPRecord, tools: list[dict[str, Any]], *, sample: int = 0,
                   seed: int = 0, max_tool_num: int = 20, context: Mapping[str, Any] | None = None) -> TeacherForced:
    """Run the policy on every user turn of `record`, teacher-forced on the ground-truth history."""
    gt = record.messages
    pred: list[dict[str, Any]] = []
    stats = {"exact": 0, "name": 0, "miss": 0}
    n_calls = n_queries = 0
    seen = 0
    for turn, i in enumerate(record.user_indices()):
        pred += [dict(m) for m in gt[seen:i + 1] if m["role"] in ("system", "user")]
        seen = i + 1
        server = ReplayToolServer(turn_recordings(gt, i))
        history = [dict(m) for m in gt[:i + 1]]
        cont: list[dict[str, Any]] = []
        tool_num, step = 0, 0
        while True:
            ctx = {**(context or {}), "benchmark": "finmcp", "entry_id": record.id, "sample": sample,
                   "turn": turn, "step": step}
            reply = policy.reply(history + cont, tools, seed=derive_seed(seed, "finmcp", record.id, sample, turn, step),
                                 context=ctx)
            n_queries += 1
            msg = reply.to_message()
            for j, c in enumerate(msg.get("tool_calls") or []):
                c["id"] = f"call_{turn}_{step}_{j}"
            cont.append(msg)
            if not reply.tool_calls or tool_num > max_tool_num:
                break
            tool_num += len(reply.tool_calls)
            for c, call in zip(msg["tool_calls"], reply.tool_calls):
                cont.append({"role": "tool", "tool_call_id": c["id"], "content": server.answer(call)})
            n_calls += len(reply.tool_calls)
            step += 1
        for k, v in server.stats.items():
            stats[k] += v
        pred += cont
    return TeacherForced(pred, stats, n_calls, n_queries)
