"""Tasks <-> verl RL rows (parquet), in the layout of CM2's verl converter that EnvACE's dataset reads.

Columns: `prompt` (the chat up to and including the first user message), `data_source`, `agent_name`,
`extra_info` {`index`, `uuid`, `original_index` (= uuid, CM2's name), `messages` (the full
conversation), `tools` (JSON string), `interaction_kwargs` {`name`: "checklist", `checklist_list`},
`need_tools_kwargs`, and envace's own `domain`, `initial_state`, `meta` (JSON strings)}, and
`reward_model` {`style`: "rule", `ground_truth`: JSON string of the per-turn gold answer values}.

Departure: `checklist_list` is a JSON *string* (the annotations, as in CM2 items), and tool-call
`arguments` inside messages are JSON strings (the OpenAI wire form). Parquet stores a list of objects as
one struct type unified over all rows, so objects with differing keys (the arguments of different
tools, rule payloads) would come back padded with nulls; strings keep the round trip lossless. The
reader accepts `checklist_list` as a string or a list.
"""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from envace.data.cm2 import task_to_cm2, umask_mode
from envace.data.errors import DataError, Problem
from envace.data.validate import (
    RowCheck,
    build_task,
    check_checklists,
    check_messages,
    check_tools,
    check_uuid,
    check_world,
)
from envace.types import Message, Task

COLUMNS = ("prompt", "data_source", "agent_name", "extra_info", "reward_model")


def _wire_message(m: Message) -> dict[str, Any]:
    """Uniform keys on every message so parquet's struct type is the same for all rows."""
    calls = [{"type": "function", "id": c.id,
              "function": {"name": c.name, "arguments": json.dumps(c.arguments, ensure_ascii=False)}}
             for c in m.tool_calls]
    return {"role": m.role, "content": m.content, "tool_calls": calls or None, "name": m.name}


def _prompt(messages: list[Message]) -> list[Message]:
    first_user = next(i for i, m in enumerate(messages) if m.role == "user")
    return messages[: first_user + 1]


def to_verl_rows(tasks: list[Task], data_source: str = "envace_toolworld",
                 agent_name: str = "envace_agent") -> list[dict[str, Any]]:
    """One verl row per task. Raises DataError when a task holds a value JSON cannot encode."""
    rows = []
    for index, task in enumerate(tasks):
        try:
            rows.append(_row(task, index, data_source, agent_name))
        except (TypeError, ValueError) as exc:
            raise DataError([Problem("<tasks>", index, "<task>", f"holds a value JSON cannot encode ({exc})",
                                     "keep meta and state JSON-native (str, int, float, bool, list, dict)",
                                     uuid=task.uuid)]) from None
    return rows


def _row(task: Task, index: int, data_source: str, agent_name: str) -> dict[str, Any]:
    item = task_to_cm2(task)
    world = item["extra_info"]["envace"]
    return {
        "prompt": [_wire_message(m) for m in _prompt(task.messages)],
        "data_source": data_source,
        "agent_name": agent_name,
        "extra_info": {
            "index": index,
            "uuid": task.uuid,
            "original_index": task.uuid,
            "messages": [_wire_message(m) for m in task.messages],
            "tools": json.dumps(task.tools, ensure_ascii=False),
            "interaction_kwargs": {"name": "checklist", "checklist_list": json.dumps(item["checklists"])},
            "need_tools_kwargs": False,
            "domain": world["domain"],
            "initial_state": json.dumps(world["initial_state"], allow_nan=False),
            "meta": json.dumps(world["meta"], allow_nan=False),
        },
        "reward_model": {"style": "rule", "ground_truth": json.dumps(task.meta.get("answers", []))},
    }


def _json_field(value: Any, path: str, rc: RowCheck, want: type | tuple[type, ...], allow_native: bool = False) -> Any:
    if allow_native and isinstance(value, want):
        return value
    if not isinstance(value, str):
        rc.add(path, f"is a {type(value).__name__}, not a JSON string", "write it with json.dumps")
        return None
    try:
        obj = json.loads(value)
    except json.JSONDecodeError as exc:
        rc.add(path, f"is not valid JSON ({exc.msg})", "write it with json.dumps")
        return None
    if not isinstance(obj, want) and obj is not None:
        rc.add(path, f"decodes to a {type(obj).__name__}", f"it must decode to {want}")
        return None
    return obj


def parse_verl_row(row: Any, file: str, index: int) -> tuple[Task | None, list[Problem]]:
    rc = RowCheck(file, index)
    missing = [c for c in COLUMNS if not isinstance(row, dict) or c not in row]
    if missing:
        rc.add(",".join(missing), "column(s) missing", f"write rows with the columns {list(COLUMNS)} (to_verl_rows)")
        return None, rc.problems
    ex = row["extra_info"]
    if not isinstance(ex, dict):
        rc.add("extra_info", f"is a {type(ex).__name__}, not an object", "write extra_info as a struct")
        return None, rc.problems
    uuid = check_uuid(ex.get("uuid") or ex.get("original_index"), "extra_info.uuid", rc)
    prompt = row["prompt"]
    last = prompt[-1] if isinstance(prompt, list) and prompt else None
    if not isinstance(last, dict) or last.get("role") != "user":
        rc.add("prompt", "is not a list of messages ending with the first user message",
               "set prompt = messages up to and including the first user turn")
    messages = check_messages(ex.get("messages"), "extra_info.messages", rc)
    tools_raw = _json_field(ex.get("tools"), "extra_info.tools", rc, list)
    tools = check_tools(tools_raw, "extra_info.tools", rc) if tools_raw is not None else None
    ik = ex.get("interaction_kwargs")
    checklists = None
    if not isinstance(ik, dict):
        rc.add("extra_info.interaction_kwargs", "is missing", 'write {"name": "checklist", "checklist_list": ...}')
    elif messages is not None:
        raw = _json_field(ik.get("checklist_list"), "extra_info.interaction_kwargs.checklist_list", rc, list,
                          allow_native=True)
        if raw is not None:
            n_turns = sum(m.role == "user" for m in messages)
            checklists = check_checklists(raw, "extra_info.interaction_kwargs.checklist_list", rc, n_turns)
    state = _json_field(ex.get("initial_state") or "null", "extra_info.initial_state", rc, dict)
    meta = _json_field(ex.get("meta") or "{}", "extra_info.meta", rc, dict)
    world = check_world({"domain": ex.get("domain") or "", "initial_state": state, "meta": meta or {}},
                        "extra_info", rc, messages)
    if rc.problems or uuid is None or messages is None or tools is None or checklists is None or world is None:
        return None, rc.problems
    return build_task(uuid, messages, tools, checklists, world), []


def write_verl_parquet(tasks: list[Task], path: str | Path, data_source: str = "envace_toolworld",
                       agent_name: str = "envace_agent") -> Path:
    """Write the rows atomically (temporary file + os.replace); a failure leaves nothing behind."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = Path(path)
    try:
        rows = to_verl_rows(tasks, data_source, agent_name)
    except DataError as exc:
        raise DataError([dataclasses.replace(p, file=f"{path} (being written)") for p in exc.problems]) from None
    problems = [p for i, r in enumerate(rows) for p in parse_verl_row(r, f"{path} (being written)", i)[1]]
    if problems:
        raise DataError(problems)
    table = pa.Table.from_pylist(rows)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        pq.write_table(table, tmp)
        os.chmod(tmp, umask_mode())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


def read_verl_parquet(path: str | Path) -> list[Task]:
    """Read verl rows back into Tasks, checking every row; raises DataError naming file, row and field."""
    import pyarrow.parquet as pq

    path = Path(path)
    try:
        rows = pq.read_table(path).to_pylist()
    except Exception as exc:  # noqa: BLE001 - any reader failure means the file is unusable
        raise DataError([Problem(str(path), None, "<file>", f"is not a readable parquet file ({exc})",
                                 "write it with `envace data build` (or envace.data.write_verl_parquet)")]) from None
    tasks: list[Task] = []
    problems: list[Problem] = []
    for i, row in enumerate(rows):
        task, probs = parse_verl_row(row, str(path), i)
        problems.extend(probs)
        if task is not None:
            tasks.append(task)
    if problems:
        raise DataError(problems)
    return tasks
