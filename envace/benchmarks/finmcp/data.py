"""FinMCP-Bench records and tool schemas, from paths the user provides (the data is CC-BY-NC-SA-4.0 and
may not be shipped; the Qieman MCP tool schemas are not part of the dataset).

Record (one sample of `benchmark_final.json` etc., a JSON array; JSON Lines is accepted too):
`{id, scenery: "L1-L2-L3", diff_level: {level, ...}, tool_list, question, answer, task?, messages: [...]}`
where `messages` is the full ground-truth conversation in OpenAI shape (user / assistant with
`tool_calls` whose `arguments` is a JSON string / tool with `tool_call_id` / final assistant).

Tool schemas (`MCP_SCHEMA`): a JSON array of OpenAI tools `{"type": "function", "function": {...}}`; bare
`{name, description, parameters}` and MCP listings `{name, description, inputSchema}` are converted.
Without a schema file, `synthesise_schemas` builds one per tool name from the argument names seen in the
ground truth (all typed as strings, none required): not faithful, and the benchmark says so.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


class FinMCPDataError(ValueError):
    """A record or schema file is malformed; the message names the file, the record and the field."""


@dataclass
class FinMCPRecord:
    id: str
    scenery: str
    level: str
    task: str
    messages: list[dict[str, Any]]
    raw: dict[str, Any] = field(repr=False, default_factory=dict)

    @property
    def level1(self) -> str:
        return self.scenery.split("-")[0].strip()

    def user_indices(self) -> list[int]:
        return [i for i, m in enumerate(self.messages) if m.get("role") == "user"]


def _read_json_items(path: Path) -> list[Any]:
    text = path.read_text(encoding="utf-8")
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        try:
            return [json.loads(line) for line in text.splitlines() if line.strip()]
        except json.JSONDecodeError as exc:
            raise FinMCPDataError(f"{path}: neither a JSON array nor JSON Lines ({exc})") from exc
    if isinstance(data, dict) and isinstance(data.get("data"), list):
        data = data["data"]
    if not isinstance(data, list):
        raise FinMCPDataError(f"{path}: expected a JSON array of records, got {type(data).__name__}")
    return data


def _check_messages(where: str, msgs: Any) -> list[dict[str, Any]]:
    if not isinstance(msgs, list) or not msgs:
        raise FinMCPDataError(f"{where}: field 'messages' must be a non-empty list of chat messages")
    for j, m in enumerate(msgs):
        if not isinstance(m, dict) or m.get("role") not in ("system", "user", "assistant", "tool"):
            raise FinMCPDataError(f"{where}: messages[{j}] must be an object with role system|user|assistant|tool")
        for c, call in enumerate(m.get("tool_calls") or []):
            fn = call.get("function") if isinstance(call, dict) else None
            if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
                raise FinMCPDataError(f"{where}: messages[{j}].tool_calls[{c}] needs function.name")
    if not any(m["role"] == "user" for m in msgs):
        raise FinMCPDataError(f"{where}: field 'messages' has no user message")
    return msgs


def load_records(path: str | Path) -> list[FinMCPRecord]:
    """Records of a FinMCP-Bench file; raises FinMCPDataError naming the record and field."""
    p = Path(path)
    if not p.is_file():
        raise FinMCPDataError(f"{p}: no such file; download DianJin/FinMCP-Bench (CC-BY-NC-SA-4.0) and pass the "
                              f"path of benchmark_final.json (or another split file)")
    out = []
    for i, rec in enumerate(_read_json_items(p)):
        where = f"{p} record {i}"
        if not isinstance(rec, dict):
            raise FinMCPDataError(f"{where}: must be an object")
        rid = str(rec.get("id", i))
        where = f"{p} record {i} (id {rid})"
        scenery, diff = rec.get("scenery"), rec.get("diff_level")
        if not isinstance(scenery, str):
            raise FinMCPDataError(f"{where}: field 'scenery' must be a string 'L1-L2-L3'")
        if not isinstance(diff, dict) or "level" not in diff:
            raise FinMCPDataError(f"{where}: field 'diff_level' must be an object with 'level'")
        out.append(FinMCPRecord(id=rid, scenery=scenery, level=str(diff["level"]),
                                task=str(rec.get("task", "any")).replace(" ", "_"),
                                messages=_check_messages(where, rec.get("messages")), raw=rec))
    return out


def _as_openai(where: str, tool: Any) -> dict[str, Any]:
    if not isinstance(tool, dict):
        raise FinMCPDataError(f"{where}: must be an object")
    if tool.get("type") == "function" and isinstance(tool.get("function"), dict):
        fn = tool["function"]
    elif "inputSchema" in tool:
        fn = {"name": tool.get("name"), "description": tool.get("description", ""), "parameters": tool["inputSchema"]}
    else:
        fn = tool
    if not isinstance(fn.get("name"), str):
        raise FinMCPDataError(f"{where}: needs a string 'name' (OpenAI tool, bare function or MCP tool)")
    params = fn.get("parameters") or {"type": "object", "properties": {}}
    return {"type": "function", "function": {"name": fn["name"], "description": fn.get("description", ""),
                                             "parameters": params}}


def load_tool_schemas(path: str | Path) -> list[dict[str, Any]]:
    p = Path(path)
    if not p.is_file():
        raise FinMCPDataError(f"{p}: no such tool-schema file; pass the Qieman MCP_SCHEMA JSON (OpenAI tools)")
    try:
        items = json.loads(p.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise FinMCPDataError(f"{p}: not valid JSON ({exc})") from exc
    if isinstance(items, dict) and isinstance(items.get("tools"), list):
        items = items["tools"]
    if not isinstance(items, list):
        raise FinMCPDataError(f"{p}: expected a JSON array of tools (or {{'tools': [...]}})")
    return [_as_openai(f"{p} tool {i}", t) for i, t in enumerate(items)]


def gold_calls(messages: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any] | str]]:
    """(name, arguments) of every assistant tool call, in order; arguments parsed when they are JSON."""
    out = []
    for m in messages:
        for call in m.get("tool_calls") or []:
            fn = call["function"]
            args = fn.get("arguments", {})
            if isinstance(args, str):
                try:
                    args = json.loads(args) if args.strip() else {}
                except json.JSONDecodeError:
                    pass
            out.append((fn["name"], args))
    return out


def synthesise_schemas(records: list[FinMCPRecord]) -> list[dict[str, Any]]:
    """Fallback schemas from the ground truth: every tool name, every argument name seen, typed string."""
    props: dict[str, dict[str, dict[str, Any]]] = {}
    for rec in records:
        for name, args in gold_calls(rec.messages):
            p = props.setdefault(name, {})
            for arg in args if isinstance(args, dict) else {}:
                p.setdefault(arg, {"type": "string"})
    return [{"type": "function", "function": {"name": n, "description": f"{n} (schema synthesised from data)",
                                              "parameters": {"type": "object", "properties": ps}}}
            for n, ps in sorted(props.items())]
