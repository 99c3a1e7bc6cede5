"""The text corpus the tiny model's BPE tokenizer is trained on: every string the tool world puts in
front of the model — system prompts, tool schemas (as the chat template prints them, one JSON line
each), user turns, tool calls, tool responses, replies and the Rehearse simulator prompts — so the
frequent JSON fragments and entity names become single tokens."""

from __future__ import annotations

import json
from collections.abc import Iterator

from envace.roles.rehearse import rehearse_messages, render_execution_result
from envace.toolcall import render_tool_call
from envace.types import Task


def task_strings(task: Task) -> Iterator[str]:
    for tool in task.tools:
        yield json.dumps(tool, ensure_ascii=False)
    for i, m in enumerate(task.messages):
        if m.content:
            yield m.content
        for call in m.tool_calls:
            yield render_tool_call(call)
        if m.role == "tool":
            try:
                yield render_execution_result(json.loads(m.content))
            except json.JSONDecodeError:
                pass
        if m.role == "assistant" and m.tool_calls:
            act_text = "\n".join(render_tool_call(c) for c in m.tool_calls)
            for style in ("compact", "full"):
                for msg in rehearse_messages(task, task.messages[:i], act_text, m.tool_calls[0],
                                             few_shot=True, style=style):
                    yield msg["content"]


def world_corpus(n_tasks: int, seed: int = 0) -> Iterator[str]:
    """Strings from `n_tasks` generated training tasks of every domain (deterministic)."""
    from envace.worlds.generator import generate_tasks

    for task in generate_tasks(n_tasks, "train", seed):
        yield from task_strings(task)
