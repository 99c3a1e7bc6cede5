"""FinMCP-Bench replay tasks for worldbench (envace.benchmarks.transitions describes the contract): each
record's ground-truth calls answered by the replay tool server (runner.py).

The live Qieman MCP server cannot be reached offline, so the "environment" is the record's own
recordings: a gold call gets its recorded result (same name and arguments), a call that left the
ground-truth path gets a recorded result of the same name, or the replay server's error payload
(`MISS_PAYLOAD`). So a perturbed call's response is not what a live server would answer: a departure the
FinMCP rows of a worldbench build carry. A response is an error when it is a JSON object with an `error` key.
The conversation: the record's system messages open it; user messages and the assistant's text replies are
kept as steps, each assistant tool call is a gold call. Domain = the record's L1 scenario; FinMCP has no
train / test split (the builder's seeded hash of the record id decides). Tools: the MCP_SCHEMA file when
given, else the schemas synthesised from the ground truth (data.py).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from envace.benchmarks.finmcp.data import FinMCPRecord, load_records, load_tool_schemas, synthesise_schemas
from envace.benchmarks.finmcp.runner import ReplayToolServer, turn_recordings
from envace.benchmarks.transitions import ReplayTask, Step
from envace.types import ToolCall


def finmcp_is_error(text: str) -> bool:
    try:
        value = json.loads(text)
    except (json.JSONDecodeError, ValueError):
        return False
    return isinstance(value, dict) and "error" in value


class FinMCPExecutor:
    def __init__(self, record: FinMCPRecord) -> None:
        recordings = [r for i in record.user_indices() for r in turn_recordings(record.messages, i)]
        self.server = ReplayToolServer(recordings)

    def execute(self, call: dict[str, Any], requestor: str) -> tuple[str, bool]:
        text = self.server.answer(ToolCall(call["name"], dict(call["arguments"])))
        return text, finmcp_is_error(text)


def _arguments(raw: Any) -> dict[str, Any]:
    if isinstance(raw, str):
        try:
            raw = json.loads(raw) if raw.strip() else {}
        except json.JSONDecodeError:
            return {}
    return dict(raw) if isinstance(raw, dict) else {}


def _steps(record: FinMCPRecord) -> tuple[list[dict[str, Any]], list[Step]]:
    opening: list[dict[str, Any]] = []
    steps: list[Step] = []
    for m in record.messages:
        role = m.get("role")
        if role == "system" and not steps:
            opening.append({"role": "system", "content": str(m.get("content") or "")})
        elif role == "user":
            steps.append(Step(message={"role": "user", "content": str(m.get("content") or "")}))
        elif role == "assistant":
            if m.get("content") and not m.get("tool_calls"):
                steps.append(Step(message={"role": "assistant", "content": str(m["content"])}))
            for c in m.get("tool_calls") or []:
                fn = c["function"]
                steps.append(Step(call={"name": fn["name"], "arguments": _arguments(fn.get("arguments"))}))
    return opening, steps


def replay_tasks(*, limit: int | None = None, data_path: str | Path, tools_path: str | Path | None = None
                 ) -> list[ReplayTask]:
    """One task per record with at least one call (of the first `limit` records)."""
    records = load_records(data_path)[: limit if limit is not None else None]
    tools = load_tool_schemas(tools_path) if tools_path else synthesise_schemas(records)
    out: list[ReplayTask] = []
    for rec in records:
        opening, steps = _steps(rec)
        if any(s.call for s in steps):
            out.append(ReplayTask(domain=rec.level1, task_id=rec.id, tools=tools, steps=steps, opening=opening,
                                  new_executor=lambda rec=rec: FinMCPExecutor(rec)))
    return out
