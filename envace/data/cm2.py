"""CM2 annotated items <-> Tasks.

A CM2 item (arXiv 2602.12268) is `{uuid, messages, tools, checklists}`: the full multi-turn
conversation in OpenAI shape, the OpenAI tool schemas, and `checklists` = a list of annotations, each
a list with one list of items per user turn (weights summing to 1 per turn). Files are a JSON array
(`.json`) or one item per line (`.jsonl`); the reader accepts either, whatever the suffix.

Tool-world tasks also carry their executable state in a top-level `extra_info.envace` record
`{"domain", "initial_state", "meta"}`. It is an envace extension: CM2's own readers ignore unknown
top-level keys, so these files stay valid CM2 input. Every row is checked before anything is returned;
`write_cm2` validates what it is about to write, writes a temporary file and renames it into place, so a
failed write leaves no partial file.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

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
from envace.input_budget import RECORD_BYTES, utf8_size
from envace.types import Task


def parse_cm2_row(row: Any, file: str, index: int, line: int | None = None) -> tuple[Task | None, list[Problem]]:
    rc = RowCheck(file, index, line)
    if not isinstance(row, dict):
        rc.add("<row>", f"is a {type(row).__name__}, not an object",
               "write each item as {uuid, messages, tools, checklists}")
        return None, rc.problems
    uuid = check_uuid(row.get("uuid"), "uuid", rc)
    messages = check_messages(row.get("messages"), "messages", rc)
    tools = check_tools(row.get("tools"), "tools", rc)
    n_turns = sum(m.role == "user" for m in messages) if messages else 0
    checklists = check_checklists(row.get("checklists"), "checklists", rc, n_turns) if messages else None
    extra = row.get("extra_info")
    if extra is not None and not isinstance(extra, dict):
        rc.add("extra_info", f"is a {type(extra).__name__}, not an object", "write extra_info as an object or omit it")
        extra = None
    world = check_world((extra or {}).get("envace"), "extra_info.envace", rc, messages)
    if rc.problems or uuid is None or messages is None or tools is None or checklists is None or world is None:
        return None, rc.problems
    return build_task(uuid, messages, tools, checklists, world), []


TOO_DEEP = "nests values too deeply to read (Python's recursion limit)"


def _read_rows(path: Path) -> list[tuple[Any, int | None]]:
    """(row, line) pairs; line is None for a JSON array. Raises DataError on unreadable JSON."""
    file = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise DataError([Problem(file, None, "<file>", f"cannot be read ({exc})",
                                 "check the path and encoding")]) from None
    stripped = text.lstrip()
    if not stripped:
        raise DataError([Problem(file, None, "<file>", "is empty", "write a JSON array or JSON lines of CM2 items")])
    if stripped[0] == "[":
        try:
            rows = json.loads(text)
        except json.JSONDecodeError as exc:
            what = f"is not valid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}"
            raise DataError([Problem(file, None, "<file>", what, "fix the JSON syntax")]) from None
        except RecursionError:
            raise DataError([Problem(file, None, "<file>", TOO_DEEP, "flatten the nested values")]) from None
        if not isinstance(rows, list):
            raise DataError([Problem(file, None, "<file>", f"is a JSON {type(rows).__name__}, not an array",
                                     "write a JSON array or JSON lines of CM2 items")])
        return [(r, None) for r in rows]
    out: list[tuple[Any, int | None]] = []
    problems: list[Problem] = []
    limit = RECORD_BYTES.value()
    for ln, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        if len(raw) * 4 > limit and utf8_size(raw) > limit:  # refused before it is decoded
            err = RECORD_BYTES.error(file, "the line is", utf8_size(raw), "split the row or shorten its text")
            problems.append(Problem(file, len(out), "<row>", err.what, err.fix, line=ln))
            out.append((None, ln))
            continue
        try:
            out.append((json.loads(raw), ln))
        except json.JSONDecodeError as exc:
            problems.append(Problem(file, len(out), "<row>", f"is not valid JSON ({exc.msg} at column {exc.colno})",
                                    "write one JSON object per line", line=ln))
            out.append((None, ln))
        except RecursionError:
            problems.append(Problem(file, len(out), "<row>", TOO_DEEP, "flatten the nested values", line=ln))
            out.append((None, ln))
    if problems:
        raise DataError(problems)
    return out


def load_cm2(path: str | Path) -> list[Task]:
    """Read CM2 items. Raises DataError (naming file, row, uuid, field and fix) if any row is bad."""
    path = Path(path)
    tasks: list[Task] = []
    problems: list[Problem] = []
    seen: dict[str, int] = {}
    for i, (row, line) in enumerate(_read_rows(path)):
        task, probs = parse_cm2_row(row, str(path), i, line)
        problems.extend(probs)
        if task is not None:
            if task.uuid in seen:
                problems.append(Problem(str(path), i, "uuid", f"repeats the uuid of row {seen[task.uuid]}",
                                        "make uuids unique", task.uuid, line))
            seen.setdefault(task.uuid, i)
            tasks.append(task)
    if problems:
        raise DataError(problems)
    return tasks


def task_to_cm2(task: Task) -> dict[str, Any]:
    """One CM2 item. Extra annotations go back into `checklists`; world state into extra_info.envace."""
    meta = dict(task.meta)
    extra_sets = meta.pop("cm2_extra_checklists", None) or []
    checklists = [[[i.to_dict() for i in turn] for turn in task.checklists]] + list(extra_sets)
    return {
        "uuid": task.uuid,
        "messages": [m.to_openai() for m in task.messages],
        "tools": task.tools,
        "checklists": checklists,
        "extra_info": {"envace": {"domain": task.domain, "initial_state": task.initial_state, "meta": meta}},
    }


def umask_mode() -> int:
    """The mode a plain `open(path, "w")` would give a new file (0644 under umask 022). mkstemp creates
    0600 files, so atomic writers chmod their temporary file to this before renaming it into place."""
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


def atomic_write_text(path: Path, text: str) -> None:
    """Write via a temporary file in the same folder and os.replace, so readers never see half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, umask_mode())
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def write_cm2(tasks: list[Task], path: str | Path) -> Path:
    """Write tasks as CM2 items: JSON lines for a `.jsonl` path, else a JSON array. Every row is
    validated first; on any problem (or a value JSON cannot hold) nothing is written."""
    path = Path(path)
    rows = [task_to_cm2(t) for t in tasks]
    try:
        lines = [json.dumps(r, ensure_ascii=False, allow_nan=False) for r in rows]
    except (TypeError, ValueError) as exc:
        raise DataError([Problem(str(path), None, "<task>", f"holds a value JSON cannot encode ({exc})",
                                 "keep meta and state JSON-native (str, int, float, bool, list, dict)")]) from None
    problems: list[Problem] = []
    for i, line in enumerate(lines):
        problems.extend(parse_cm2_row(json.loads(line), f"{path} (being written)", i)[1])
    if problems:
        raise DataError(problems)
    body = "\n".join(lines) + "\n" if path.suffix == ".jsonl" else "[\n" + ",\n".join(lines) + "\n]\n"
    atomic_write_text(path, body)
    return path
