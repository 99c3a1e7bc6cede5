"""The oracle replay of τ²-bench: a scripted agent + user pair that plays each task's gold actions through
our adapter, scored by τ²'s own orchestrator and evaluator. It proves the plumbing (tools, ids, state,
the evaluator) on the user's τ² install or clone: every task must score 1.0; it says nothing of a model.

`GoldScript` holds the shared state per (domain, task, sample): the agent replays the task's gold
assistant actions one per turn, asks the user to perform the gold user actions (telecom's dual
control), then states every `communicate_info` string; the user performs its gold actions and ends with
###STOP### once the agent has finished. `drop` leaves out gold actions by index (a negative control:
dropping a write must score 0). `script.agent` and `script.user` are the two `BenchPolicy` sides.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from envace.benchmarks.base import GoldOutcome
from envace.benchmarks.tau2.data import load_task_file, load_tasks, load_tau2
from envace.engines.reply import AssistantReply
from envace.types import ToolCall


class GoldScript:
    """Shared state of a scripted agent and user, per (domain, task, sample)."""

    def __init__(self, tasks: Mapping[tuple[str, str], Any], drop: Mapping[str, set[int]] | None = None) -> None:
        self.tasks, self.drop = dict(tasks), dict(drop or {})
        self.state: dict[tuple[str, str, int], dict[str, Any]] = {}
        self.agent, self.user = GoldSide(self, "agent"), GoldSide(self, "user")

    def _st(self, ctx: Mapping[str, Any]) -> dict[str, Any]:
        key = (ctx["domain"], str(ctx["task_id"]), ctx["sample"])
        if key not in self.state:
            task = self.tasks[(ctx["domain"], str(ctx["task_id"]))]
            acts = [a for i, a in enumerate(task.evaluation_criteria.actions or [])
                    if i not in self.drop.get(str(ctx["task_id"]), set())]
            self.state[key] = {"actions": acts, "cursor": 0, "final": False,
                               "info": list(task.evaluation_criteria.communicate_info or [])}
        return self.state[key]

    def agent_reply(self, ctx: Mapping[str, Any]) -> AssistantReply:
        st = self._st(ctx)
        if st["cursor"] < len(st["actions"]):
            act = st["actions"][st["cursor"]]
            if act.requestor == "assistant":
                st["cursor"] += 1
                return AssistantReply(tool_calls=[ToolCall(act.name, dict(act.arguments))])
            return AssistantReply(content=f"Please do this on your device: {act.name}.")
        st["final"] = True
        said = "; ".join(i.replace(",", "") for i in st["info"])
        return AssistantReply(content=f"All done. {said} Is there anything else?")

    def user_reply(self, ctx: Mapping[str, Any]) -> AssistantReply:
        st = self._st(ctx)
        if st["cursor"] < len(st["actions"]) and st["actions"][st["cursor"]].requestor == "user":
            act = st["actions"][st["cursor"]]
            st["cursor"] += 1
            return AssistantReply(tool_calls=[ToolCall(act.name, dict(act.arguments))])
        if st["final"]:
            return AssistantReply(content="Thanks, that is all. ###STOP###")
        return AssistantReply(content="Hi, I need help with my request. Please go on.")


class GoldSide:
    """One side (agent or user) of a `GoldScript`, as a `BenchPolicy`."""

    def __init__(self, script: GoldScript, side: str) -> None:
        self.script, self.side, self.name = script, side, f"gold-{side}"

    def reply(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], *, seed: int | None = None,
              context: Mapping[str, Any] | None = None) -> AssistantReply:
        ctx = dict(context or {})
        return self.script.agent_reply(ctx) if self.side == "agent" else self.script.user_reply(ctx)


def gold_replay(options: Mapping[str, Any], paths: Mapping[str, str | None], limit: int | None,
                seed: int) -> GoldOutcome:
    """`GoldScript` as agent and user over the selected domains (or `paths.tau2_tasks`), scored by τ²."""
    from envace.benchmarks.tau2.benchmark import Tau2Benchmark

    t2 = load_tau2(paths.get("tau2"))
    opts = {k: v for k, v in dict(options).items() if k in ("domains", "split", "max_steps")}
    tasks_path = paths.get("tau2_tasks")
    bench = Tau2Benchmark(checkout=paths.get("tau2"), tasks_path=tasks_path, **opts)
    tasks = {}
    for domain in bench.domains:
        found = load_task_file(t2, tasks_path) if tasks_path else load_tasks(t2, domain, bench.split)
        tasks.update({(domain, str(t.id)): t for t in found[: limit if limit is not None else None]})
    script = GoldScript(tasks)
    bench.user_sim = script.user
    result = bench.run(script.agent, limit=limit, k=1, seed=seed)
    return GoldOutcome.of(result, source=f"{t2.version} from {t2.source}")
