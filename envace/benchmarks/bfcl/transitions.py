"""BFCL-v4 multi-turn replay tasks for worldbench: each entry's gold call strings executed in BFCL's own
backend classes (envace.benchmarks.transitions describes the contract).

Execution is `multi_turn_utils.execute_multi_turn_func_call` (bfcl_eval), as BFCL's checker runs the
ground truth: the entry's `involved_classes` instantiated and loaded with its `initial_config`, each call
string evaluated against them, the result stringified as BFCL does (dicts as JSON) and an exception
answered "Error during execution: ...". Each executor uses its own instance name, so a replay never shares
state with another, and drops its instances when it is garbage (`close`). A response is an error when it
is that exception text or a JSON object with an `error` key (the backends' refusal form).

The conversation before a call: each turn's user messages, then that turn's earlier gold calls. The
tools are the entry's function docs converted as BFCL's OpenAI FC handlers convert them; each doc's
`response` schema is kept as the tool's result schema. BFCL has no train / test split: the builder's
seeded hash of the entry id decides.
"""

from __future__ import annotations

import itertools
import json
import re
from typing import Any

from envace.benchmarks.bfcl.compat import load_bfcl
from envace.benchmarks.bfcl.data import load_category, openai_tools
from envace.benchmarks.bfcl.gold import parse_call
from envace.benchmarks.transitions import ReplayTask, Step

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


def replay_tasks(*, limit: int | None = None, categories: list[str] | None = None) -> list[ReplayTask]:
    """One task per entry of each multi-turn category (the first `limit` entries of each)."""
    out: list[ReplayTask] = []
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
            out.append(ReplayTask(domain=category, task_id=entry.id, tools=tools, steps=steps,
                                  new_executor=lambda e=entry: BFCLExecutor(e),
                                  result_schemas={d["name"]: _gorilla_to_json(d["response"]) for d in docs
                                                  if isinstance(d.get("response"), dict)}))
    return out
