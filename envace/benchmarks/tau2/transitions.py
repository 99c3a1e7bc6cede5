"""τ²-Bench replay tasks for worldbench: each task's gold actions executed in τ²'s own environment
(envace.benchmarks.transitions describes the contract).

As τ²'s evaluator builds the gold environment: the domain's environment constructor, then
`set_state(initialization_data, initialization_actions, message_history)` from the task's initial
state; each gold action (`evaluation_criteria.actions`) is sent as a τ² `ToolCall` with its requestor
through `Environment.get_response`, whose `ToolMessage` gives the response text and τ²'s own error flag
(a tool that raised answers "Error: <message>"). The tools offered are the agent's tools, plus the
user's device tools in telecom (dual control; their calls have requestor "user"). Splits are τ²'s own
`split_tasks.json` train / test. τ²'s conversation is simulated (the user is an LLM), so the
conversation before a call holds only the earlier gold calls and their responses.
"""

from __future__ import annotations

from typing import Any

from envace.benchmarks.tau2.data import DOMAINS, load_tasks, load_tau2
from envace.benchmarks.transitions import SPLITS, ReplayTask, Step


class Tau2Executor:
    def __init__(self, t2: Any, domain: str, task: Any) -> None:
        self.t2 = t2
        self.env = t2.registry.registry.get_env_constructor(domain)()
        ist = task.initial_state
        self.env.set_state(ist.initialization_data if ist else None, ist.initialization_actions if ist else None,
                           list(ist.message_history or []) if ist else [])
        self.n = 0

    def execute(self, call: dict[str, Any], requestor: str) -> tuple[str, bool]:
        self.n += 1
        tc = self.t2.message.ToolCall(id=f"wb_{self.n}", name=call["name"], arguments=dict(call["arguments"]),
                                      requestor=requestor)
        msg = self.env.get_response(tc)
        return msg.content or "", bool(msg.error)


def _tools(env: Any) -> list[dict[str, Any]]:
    tools = [t.openai_schema for t in env.get_tools()]
    try:
        tools += [t.openai_schema for t in env.get_user_tools()]
    except ValueError:  # τ²: "User tools not available" (airline, retail)
        pass
    return tools


def replay_tasks(*, limit: int | None = None, domains: list[str] | None = None,
                 splits: tuple[str, ...] = SPLITS) -> list[ReplayTask]:
    """One task per τ² task with gold actions, per domain and split (the first `limit` tasks of each)."""
    t2 = load_tau2()
    out: list[ReplayTask] = []
    for domain in domains or list(DOMAINS):
        if domain not in DOMAINS:
            raise ValueError(f"τ² domain {domain!r} is not one of {list(DOMAINS)}")
        tools = _tools(t2.registry.registry.get_env_constructor(domain)())
        for split in splits:
            tasks = load_tasks(t2, domain, split)
            for task in tasks[:limit] if limit else tasks:
                actions = (task.evaluation_criteria.actions if task.evaluation_criteria else None) or []
                if not actions:
                    continue
                steps = [Step(call={"name": a.name, "arguments": dict(a.arguments or {})},
                              requestor=str(getattr(a, "requestor", "assistant") or "assistant")) for a in actions]
                out.append(ReplayTask(domain=domain, task_id=str(task.id), tools=tools, steps=steps, split=split,
                                      new_executor=lambda t2=t2, d=domain, task=task: Tau2Executor(t2, d, task)))
    return out
