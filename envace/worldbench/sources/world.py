"""Built-in tool-world task scripts: each generated task's reference calls executed in WorldEnvironment.

Train and test tasks come from the generator's own splits (envace.worlds.generator): every test task
holds a (shape, entity) pair that no train task holds, so test transitions ask about entity/shape
combinations the train transitions (few-shot, reference rows) never show. The reference conversation's
user messages and final replies are kept as conversation; its tool messages are not copied, each call is
executed again and its observation (`Observation.to_text`, what the Act role sees) recorded.
"""

from __future__ import annotations

from typing import Any

from envace.types import Task, ToolCall
from envace.worldbench.records import Source, Split
from envace.worldbench.script import Step, TaskScript
from envace.worlds.environment import WorldEnvironment
from envace.worlds.generator import generate_tasks


class WorldExecutor:
    def __init__(self, task: Task) -> None:
        self.env = WorldEnvironment()
        self.env.reset(task)

    def execute(self, call: dict[str, Any], requestor: str) -> tuple[str, bool]:
        obs = self.env.execute(ToolCall(call["name"], dict(call["arguments"])))
        return obs.to_text(), not obs.ok


def world_scripts(n_train: int = 60, n_test: int = 60, seed: int = 0) -> list[TaskScript]:
    out: list[TaskScript] = []
    for split, n in ((Split.TRAIN, n_train), (Split.TEST, n_test)):
        for task in generate_tasks(n, split.value, seed):
            steps: list[Step] = []
            for m in task.messages:  # the system prompt is the Act role's, not conversation
                if m.role == "user" or (m.role == "assistant" and not m.tool_calls):
                    steps.append(Step(message={"role": m.role, "content": m.content}))
                elif m.role == "assistant":
                    steps += [Step(call={"name": c.name, "arguments": dict(c.arguments)}) for c in m.tool_calls]
            out.append(TaskScript(source=Source.WORLD, domain=task.domain, task_id=task.uuid, split=split,
                                  tools=task.tools, steps=steps, new_executor=lambda task=task: WorldExecutor(task)))
    return out
