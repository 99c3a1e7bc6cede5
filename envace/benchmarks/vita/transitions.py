"""VitaBench replay tasks for worldbench, from a user's checkout: recorded calls replayed in the checkout's
environments (envace.benchmarks.transitions describes the contract).

VitaBench tasks carry no gold call sequence (they are scored by a rubric judge), so the calls come from a
conversation: a task's own `message_history`, or a VitaBench results file (`Results` JSON:
`{"simulations": [{"task_id", "messages": [...]}]}`, as `vita run` saves it; the first simulation of each
task is used). Each assistant tool call is executed again, in order, in a fresh environment built by the
checkout exactly as VitaBench's runner builds it (checkout.py); the response recorded is what the
environment answers now, not the text stored in the file. Tasks without calls are skipped. VitaBench has
no train / test split: the builder's seeded hash of the task id decides.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from envace.benchmarks.transitions import ReplayTask, Step
from envace.benchmarks.vita.checkout import VitaCheckout
from envace.benchmarks.vita.data import SETS, language_name, load_tasks


class VitaExecutor:
    def __init__(self, checkout: VitaCheckout, task: Any) -> None:
        self.checkout, self.env, self.n = checkout, checkout.environment(task), 0

    def execute(self, call: dict[str, Any], requestor: str) -> tuple[str, bool]:
        self.n += 1
        msg = self.env.get_response(self.checkout.tool_call(call["name"], dict(call["arguments"]), f"wb_{self.n}"))
        return str(getattr(msg, "content", "") or ""), bool(getattr(msg, "error", False))


def read_simulations(path: str | Path) -> dict[str, list[dict[str, Any]]]:
    """{task_id: messages} of the first simulation of each task in a VitaBench results file."""
    p = Path(path)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ValueError(f"{p}: VitaBench results file not found") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"{p}: not valid JSON ({exc})") from None
    sims = data.get("simulations") if isinstance(data, dict) else None
    if not isinstance(sims, list):
        raise ValueError(f"{p}: expected a VitaBench results object with a 'simulations' list")
    out: dict[str, list[dict[str, Any]]] = {}
    for i, s in enumerate(sims):
        if not isinstance(s, dict) or not isinstance(s.get("messages"), list) or "task_id" not in s:
            raise ValueError(f"{p}: simulations[{i}] needs 'task_id' and a 'messages' list")
        out.setdefault(str(s["task_id"]), s["messages"])
    return out


def _steps(messages: list[dict[str, Any]], where: str) -> list[Step]:
    steps: list[Step] = []
    for j, m in enumerate(messages):
        role = m.get("role") if isinstance(m, dict) else None
        if role == "user" and m.get("content"):
            steps.append(Step(message={"role": "user", "content": str(m["content"])}))
        elif role == "assistant":
            if m.get("content"):
                steps.append(Step(message={"role": "assistant", "content": str(m["content"])}))
            for c in m.get("tool_calls") or []:
                fn = c.get("function", c) if isinstance(c, dict) else {}
                args = fn.get("arguments", {})
                if isinstance(args, str):
                    try:
                        args = json.loads(args)
                    except json.JSONDecodeError:
                        raise ValueError(f"{where} message {j}: tool call arguments are not JSON") from None
                if not isinstance(fn.get("name"), str) or not isinstance(args, dict):
                    raise ValueError(f"{where} message {j}: a tool call needs 'name' and object 'arguments'")
                steps.append(Step(call={"name": fn["name"], "arguments": args}))
    return steps


def replay_tasks(*, limit: int | None = None, checkout: str | Path, sets: list[str] | None = None,
                 language: str = "en", calls_file: str | Path | None = None) -> list[ReplayTask]:
    """One task per VitaBench task with recorded calls, per set (the first `limit` tasks of each set)."""
    co = VitaCheckout(Path(checkout), language_name(language))
    sims = read_simulations(calls_file) if calls_file else {}
    out: list[ReplayTask] = []
    for set_name in sets or list(SETS):
        tasks = load_tasks(checkout, set_name, language)
        for task in tasks[:limit] if limit else tasks:
            messages = sims.get(task.id) or task.message_history
            steps = _steps(messages, f"VitaBench task {task.id}")
            if not any(s.call for s in steps):
                continue
            tools = [t.openai_schema for t in co.environment(task).get_tools()]
            out.append(ReplayTask(domain=set_name, task_id=task.id, tools=tools, steps=steps,
                                  new_executor=lambda task=task: VitaExecutor(co, task)))
    return out
