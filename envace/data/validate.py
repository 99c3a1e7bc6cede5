"""Row validation shared by the CM2 and verl-parquet readers: turns one row's raw fields into a Task
or records, per field path, what is wrong and how to fix it.

Normalisations (documented departures from a byte-exact copy of the input):
- message keys other than role / content / tool_calls / name are dropped (Task messages hold only
  those); tool-call `arguments` given as a JSON string are decoded to an object; `content: null` → "";
- checklist item ids given as integers become strings; item keys outside the CM2 schema are kept in the
  item's `extra_info["cm2_unknown_fields"]` rather than dropped;
- CM2 annotations beyond the first are kept in `task.meta["cm2_extra_checklists"]` (Task holds one
  checklist set natively; `envace.rewards.checklist.all_checklists` reads both).
Bounds (envace.input_budget): a message's text, or a row's tool schemas, over MESSAGE_BYTES and any string
holding a lone surrogate are problems of the row, so `envace data add` refuses what training would fail
on, before anything is tokenised.
Tool-world rows carry `{"domain", "initial_state", "meta"}` (the `envace` record); the initial state is
validated against the domain's database model and the gold calls are replayed on it.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from envace.data.errors import Problem
from envace.input_budget import MESSAGE_BYTES, text_bytes, text_problem
from envace.types import ChecklistItem, Message, Task, ToolCall

ROLES = ("system", "user", "assistant", "tool")
FOCUS = ("assistant.tool_calls", "tool.content", "assistant.content.thinking", "assistant.content.user_visible_reply")
ITEM_KEYS = ("id", "evidence", "focus_on", "question", "pass_condition", "failure_examples",
             "required_for_next_turn", "dependence", "weight", "extra_info")
WEIGHT_TOL = 1e-3


@dataclass
class RowCheck:
    """Collects the problems of one row."""

    file: str
    row: int
    line: int | None = None
    uuid: str | None = None
    problems: list[Problem] = field(default_factory=list)

    def add(self, path: str, what: str, fix: str) -> None:
        self.problems.append(Problem(self.file, self.row, path, what, fix, self.uuid, self.line))


SURROGATE_FIX = "write valid Unicode text (a \\udXXX escape must be one half of a surrogate pair)"


def check_text(value: Any, path: str, rc: RowCheck) -> bool:
    """False (and a problem naming the string's path) when a string of `value` holds a lone surrogate:
    no tokenizer encodes it, so training would fail on it long after loading."""
    found = text_problem(value, path)
    if found is None:
        return True
    rc.add(found[0], "holds a lone surrogate (not valid Unicode text)", SURROGATE_FIX)
    return False


def check_budget(value: Any, path: str, rc: RowCheck, subject: str) -> bool:
    """False (and a problem) when the text of `value` is over the message budget (envace.input_budget)."""
    size = text_bytes(value)
    if size <= MESSAGE_BYTES.value():
        return True
    err = MESSAGE_BYTES.error(path, f"{subject} is", size, "split or shorten it")
    rc.add(path, err.what, err.fix)
    return False


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def check_uuid(value: Any, path: str, rc: RowCheck) -> str | None:
    if isinstance(value, str) and value.strip():
        if not check_text(value, path, rc):
            return None
        rc.uuid = value
        return value
    rc.add(path, f"is {value!r}, not a non-empty string", "give every row a unique string uuid")
    return None


def _tool_call(raw: Any, path: str, rc: RowCheck) -> ToolCall | None:
    if not isinstance(raw, dict):
        rc.add(path, f"is a {type(raw).__name__}, not an object",
               'write {"function": {"name": ..., "arguments": {...}}}')
        return None
    fn = raw.get("function", raw)
    fpath = f"{path}.function" if "function" in raw else path
    if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not fn.get("name"):
        rc.add(f"{fpath}.name", "is missing or not a non-empty string", "name the tool being called")
        return None
    args = fn.get("arguments", {})
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except json.JSONDecodeError as exc:
            rc.add(f"{fpath}.arguments", f"is a string that is not JSON ({exc.msg})",
                   "write the arguments as a JSON object")
            return None
    if not isinstance(args, dict):
        rc.add(f"{fpath}.arguments", f"is a {type(args).__name__}, not an object",
               "write the arguments as a JSON object")
        return None
    if not check_text(args, f"{fpath}.arguments", rc):  # a JSON string's \\udXXX escapes decode only now
        return None
    cid = raw.get("id")
    return ToolCall(name=fn["name"], arguments=args, id=cid if isinstance(cid, str) and cid else None)


def check_messages(value: Any, path: str, rc: RowCheck) -> list[Message] | None:
    if not isinstance(value, list) or not value:
        rc.add(path, f"is {type(value).__name__ if value is not None else 'missing'}, not a non-empty list",
               "give the full conversation as a list of {role, content} messages")
        return None
    out: list[Message] = []
    ok = True
    for i, m in enumerate(value):
        mp = f"{path}[{i}]"
        if not isinstance(m, dict):
            rc.add(mp, f"is a {type(m).__name__}, not an object", "write each message as {role, content}")
            ok = False
            continue
        if not check_budget(m, mp, rc, "the message's text") or not check_text(m, mp, rc):
            ok = False  # checked before its parts: training would tokenise all of it
            continue
        role, content = m.get("role"), m.get("content")
        if role not in ROLES:
            rc.add(f"{mp}.role", f"is {role!r}", f"use one of {list(ROLES)}")
            ok = False
        if content is not None and not isinstance(content, str):
            rc.add(f"{mp}.content", f"is a {type(content).__name__}, not a string",
                   "join content parts into one string")
            ok = False
        name = m.get("name")
        if name is not None and not isinstance(name, str):
            rc.add(f"{mp}.name", f"is {name!r}, not a string", "give the tool name as a string or omit it")
            ok = False
        raw_calls = m.get("tool_calls") or []
        if not isinstance(raw_calls, list):
            rc.add(f"{mp}.tool_calls", f"is a {type(raw_calls).__name__}, not a list", "write tool_calls as a list")
            ok = False
            continue
        if raw_calls and role != "assistant":
            rc.add(f"{mp}.tool_calls", f"appears on a {role!r} message", "only assistant messages make tool calls")
            ok = False
        calls = [_tool_call(c, f"{mp}.tool_calls[{j}]", rc) for j, c in enumerate(raw_calls)]
        if any(c is None for c in calls):
            ok = False
            continue
        out.append(Message(role=str(role), content=content or "", tool_calls=calls, name=name))  # type: ignore[arg-type]
    if not ok:
        return None
    first = next((m for m in out if m.role != "system"), None)
    if first is None or first.role != "user":
        rc.add(path, "does not start with a user message (after the system prompt)",
               "the conversation must open with the user's request")
        return None
    return out


def check_tools(value: Any, path: str, rc: RowCheck) -> list[dict[str, Any]] | None:
    if not isinstance(value, list):
        rc.add(path, f"is {type(value).__name__}, not a list", "give the OpenAI function schemas as a list")
        return None
    if not check_budget(value, path, rc, "the text of the tool schemas") or not check_text(value, path, rc):
        return None
    names: set[str] = set()
    ok = True
    for i, t in enumerate(value):
        tp = f"{path}[{i}]"
        fn = t.get("function", t) if isinstance(t, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not fn["name"]:
            rc.add(f"{tp}.function.name", "is missing",
                   'write {"type": "function", "function": {"name": ..., "parameters": {...}}}')
            ok = False
            continue
        if fn["name"] in names:
            rc.add(f"{tp}.function.name", f"duplicates tool {fn['name']!r}", "give each tool a unique name")
            ok = False
        names.add(fn["name"])
        if "parameters" in fn and not isinstance(fn["parameters"], dict):
            rc.add(f"{tp}.function.parameters", f"is a {type(fn['parameters']).__name__}, not an object",
                   "write parameters as a JSON Schema object")
            ok = False
    return value if ok else None


def _item(raw: Any, path: str, rc: RowCheck) -> ChecklistItem | None:
    if not isinstance(raw, dict):
        rc.add(path, f"is a {type(raw).__name__}, not an object", "write each checklist item as an object")
        return None
    n0 = len(rc.problems)
    iid = raw.get("id")
    if isinstance(iid, int) and not isinstance(iid, bool):
        iid = str(iid)
    if not isinstance(iid, str) or not iid:
        rc.add(f"{path}.id", f"is {raw.get('id')!r}", "give the item a non-empty string id")
    if not isinstance(raw.get("question"), str) or not raw["question"].strip():
        got = "missing" if "question" not in raw else f"{raw['question']!r}, not a non-empty string"
        rc.add(f"{path}.question", f"is {got}", "state the yes/no question the judge answers")
    if not _is_number(raw.get("weight")) or raw["weight"] < 0:
        rc.add(f"{path}.weight", f"is {raw.get('weight')!r}, not a finite number >= 0",
               "give a weight; the weights of one turn sum to 1")
    if not isinstance(raw.get("required_for_next_turn", False), bool):
        rc.add(f"{path}.required_for_next_turn", f"is {raw['required_for_next_turn']!r}", "use true or false")
    focus = raw.get("focus_on", "assistant.tool_calls")
    if focus not in FOCUS:
        rc.add(f"{path}.focus_on", f"is {focus!r}", f"use one of {list(FOCUS)}")
    for key, kind, fix in (("pass_condition", str, "write the pass condition as a string"),
                           ("evidence", list, "write evidence as a list of {turn, step, from, snippet}"),
                           ("failure_examples", list, "write failure_examples as a list of strings"),
                           ("dependence", list, "write dependence as a list of item ids"),
                           ("extra_info", dict, "write extra_info as an object or null")):
        v = raw.get(key)
        if v is not None and not isinstance(v, kind):
            rc.add(f"{path}.{key}", f"is a {type(v).__name__}", fix)
    if len(rc.problems) > n0:
        return None
    extra = dict(raw.get("extra_info") or {})
    unknown = {k: v for k, v in raw.items() if k not in ITEM_KEYS}
    if unknown:
        extra["cm2_unknown_fields"] = unknown
    return ChecklistItem(
        id=iid, question=raw["question"], pass_condition=raw.get("pass_condition") or "", focus_on=focus,
        weight=float(raw["weight"]), required_for_next_turn=bool(raw.get("required_for_next_turn", False)),
        evidence=list(raw.get("evidence") or []), failure_examples=list(raw.get("failure_examples") or []),
        dependence=[str(d) for d in raw.get("dependence") or []], extra_info=extra)


def check_checklists(value: Any, path: str, rc: RowCheck, n_turns: int) -> list[list[list[ChecklistItem]]] | None:
    if not isinstance(value, list) or not value:
        rc.add(path, f"is {'missing' if value is None else repr(value)[:60]}, not a non-empty list",
               "give one checklist annotation: a list with one list of items per user turn")
        return None
    if not check_text(value, path, rc):  # the judge's prompt holds the questions
        return None
    if all(isinstance(t, dict) for t in value):  # a bare per-turn list without the annotation level
        rc.add(path, "is a list of items, not a list of annotations of per-turn lists",
               "wrap it: checklists = [[turn1_items, turn2_items, ...]]")
        return None
    out: list[list[list[ChecklistItem]]] = []
    ok = True
    for a, ann in enumerate(value):
        ap = f"{path}[{a}]"
        if not isinstance(ann, list) or len(ann) != n_turns:
            got = f"{len(ann)} turns" if isinstance(ann, list) else type(ann).__name__
            rc.add(ap, f"has {got} but the conversation has {n_turns} user turns",
                   "give exactly one list of items per user turn")
            ok = False
            continue
        turns: list[list[ChecklistItem]] = []
        for t, items in enumerate(ann):
            tp = f"{ap}[{t}]"
            if not isinstance(items, list) or not items:
                rc.add(tp, "is not a non-empty list of items", "give each user turn at least one item")
                ok = False
                continue
            parsed = [_item(it, f"{tp}[{k}]", rc) for k, it in enumerate(items)]
            if any(p is None for p in parsed):
                ok = False
                continue
            ids = [p.id for p in parsed]  # type: ignore[union-attr]
            if len(set(ids)) != len(ids):
                rc.add(tp, f"repeats item ids {sorted({i for i in ids if ids.count(i) > 1})}",
                       "give each item of a turn a unique id")
                ok = False
            total = sum(p.weight for p in parsed)  # type: ignore[union-attr]
            if abs(total - 1.0) > WEIGHT_TOL:
                rc.add(f"{tp}[*].weight", f"sum to {total:.4f}, not 1", "rescale the weights of this turn to sum to 1")
                ok = False
            turns.append(parsed)  # type: ignore[arg-type]
        out.append(turns)
    return out if ok else None


World = tuple[str, dict | None, dict]  # (domain, initial_state, meta)


def check_world(envace: Any, path: str, rc: RowCheck, messages: list[Message] | None) -> World | None:
    """The tool-world record: (domain, initial_state, meta)."""
    if envace is None:
        return "", None, {}
    if not isinstance(envace, dict):
        rc.add(path, f"is a {type(envace).__name__}, not an object", "write {domain, initial_state, meta} or omit it")
        return None
    if not check_text(envace, path, rc):  # the state's values reach prompts as tool results
        return None
    domain, state, meta = envace.get("domain") or "", envace.get("initial_state"), envace.get("meta") or {}
    if not isinstance(domain, str) or not isinstance(meta, dict) or (state is not None and not isinstance(state, dict)):
        rc.add(path, "has a non-string domain, a non-object meta or a non-object initial_state",
               "write domain as a string, meta and initial_state as objects")
        return None
    if state is not None and domain:
        from envace.worlds.registry import domain_names, get_domain

        if domain not in domain_names():
            rc.add(f"{path}.domain", f"is {domain!r}", f"use one of {domain_names()}")
            return None
        spec = get_domain(domain)
        try:
            spec.db_cls.from_dict(state)
        except ValidationError as exc:
            for err in exc.errors()[:5]:
                loc = ".".join(str(p) for p in err["loc"])
                rc.add(f"{path}.initial_state.{loc}",
                       f"{err['msg']} (got {err.get('input')!r}) in the {domain} database",
                       "regenerate the task or fix the state")
            return None
        if messages is not None:
            calls = [c for m in messages if m.role == "assistant" for c in m.tool_calls]
            try:
                spec.verifier.replay(state, calls)
            except Exception as exc:  # noqa: BLE001
                rc.add(f"{path}.initial_state", f"the gold calls fail on it: {exc}", "regenerate the task")
                return None
    return domain, state, meta


def build_task(uuid: str, messages: list[Message], tools: list[dict[str, Any]],
               checklists: list[list[list[ChecklistItem]]], world: World) -> Task:
    domain, state, meta = world
    meta = dict(meta)
    if len(checklists) > 1:
        meta["cm2_extra_checklists"] = [[[i.to_dict() for i in turn] for turn in s] for s in checklists[1:]]
    return Task(uuid=uuid, tools=tools, messages=messages, checklists=checklists[0], domain=domain,
                initial_state=state, meta=meta)
