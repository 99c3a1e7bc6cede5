"""BFCL-v4 multi-turn task scripts: each entry's gold call strings executed in BFCL's own backend classes.

Execution is `multi_turn_utils.execute_multi_turn_func_call` (bfcl_eval), as BFCL's checker runs the
ground truth: the entry's `involved_classes` instantiated and loaded with its `initial_config`, each call
string evaluated against them, the result stringified as BFCL does (dicts as JSON) and an exception
answered "Error during execution: ...". Each executor uses its own instance name, so a replay never shares
state with another, and drops its instances when it is garbage (`close`). A response is an error when it
is that exception text or a JSON object with an `error` key (the backends' refusal form).

The conversation before a call: each turn's user messages, then that turn's earlier gold calls. The
tools are the entry's function docs converted as BFCL's OpenAI FC handlers convert them; each doc's
`response` schema is kept as the tool's result schema. Entries are split train / test by a seeded hash
of their id (`test_fraction` of them in test).
"""

from __future__ import annotations

import itertools
import json
import re
from typing import Any

from envace.benchmarks.bfcl.compat import load_bfcl
from envace.benchmarks.bfcl.data import load_category, openai_tools
from envace.benchmarks.bfcl.gold import parse_call
from envace.worldbench.records import Source, Split
from envace.worldbench.script import Step, TaskScript, task_rng

CATEGORIES = ("multi_turn_base",)
EXEC_ERROR = "Error during execution"
_COUNTER = itertools.count()


def bfcl_is_error(text: str) -> bool:
    if text.startswith(EXEC_ERROR):
        return True
    try:
        v = json.loads(text)
    except (json.JSONDecodeError, ValueError):
        return False
    return isinstance(v, dict) and "error" in v


def call_string(call: dict[str, Any]) -> str:
    """`name(k=repr(v), ...)`: the form BFCL's executor evaluates."""
    args = ", ".join(f"{k}={v!r}" for k, v in call["arguments"].items())
    return f"{call['name']}({args})"


class BFCLExecutor:
    def __init__(self, entry: Any) -> None:
        self.mt = load_bfcl().multi_turn_utils
        self.entry = entry
        self.model_name = f"envace_worldbench_{next(_COUNTER)}"

    def execute(self, call: dict[str, Any], requestor: str) -> tuple[str, bool]:
        p = self.entry.prompt
        results, _ = self.mt.execute_multi_turn_func_call([call_string(call)], p["initial_config"],
                                                          p["involved_classes"], self.model_name, self.entry.id)
        text = str(results[0])
        return text, bfcl_is_error(text)

    def close(self) -> None:
        g = vars(self.mt)
        prefix = re.sub(r"[-./:]", "_", f"{self.model_name}_{self.entry.id}_")
        for k in [k for k in list(g) if k.startswith(prefix) and k.endswith("_instance")]:
            g.pop(k, None)

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass


def _gorilla_to_json(schema: Any) -> Any:
    if not isinstance(schema, dict):
        return schema
    mapping = load_bfcl().type_mappings.GORILLA_TO_OPENAPI
    out = {k: v for k, v in schema.items()}
    if isinstance(out.get("type"), str):
        out["type"] = mapping.get(out["type"], out["type"])
    if isinstance(out.get("properties"), dict):
        out["properties"] = {k: _gorilla_to_json(v) for k, v in out["properties"].items()}
    if isinstance(out.get("items"), dict):
        out["items"] = _gorilla_to_json(out["items"])
    return out


def is_test_entry(entry_id: str, seed: int, test_fraction: float) -> bool:
    return task_rng(seed, "bfcl-split", entry_id).random() < test_fraction


def bfcl_scripts(categories: list[str] | None = None, *, seed: int = 0, test_fraction: float = 0.3,
                 limit: int | None = None) -> list[TaskScript]:
    out: list[TaskScript] = []
    for category in categories or list(CATEGORIES):
        if not category.startswith("multi_turn"):
            raise ValueError(f"BFCL category {category!r}: worldbench records multi-turn categories only "
                             f"(single-turn entries execute nothing); use {list(CATEGORIES)}")
        for entry in load_category(category, limit):
            docs = entry.prompt["function"]
            tools = openai_tools(docs)
            steps: list[Step] = []
            for turn, calls in enumerate(entry.ground_truth):
                if turn < len(entry.prompt["question"]):
                    steps += [Step(message={"role": m["role"], "content": m["content"]})
                              for m in entry.prompt["question"][turn]]
                for text in calls:
                    c = parse_call(text, tools)
                    steps.append(Step(call={"name": c.name, "arguments": c.arguments}))
            split = Split.TEST if is_test_entry(entry.id, seed, test_fraction) else Split.TRAIN
            out.append(TaskScript(source=Source.BFCL, domain=category, task_id=entry.id, split=split, tools=tools,
                                  steps=steps, new_executor=lambda e=entry: BFCLExecutor(e),
                                  result_schemas={d["name"]: _gorilla_to_json(d["response"]) for d in docs
                                                  if isinstance(d.get("response"), dict)}))
    return out
