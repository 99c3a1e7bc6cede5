"""The Rehearse role: the policy writes the environment's response to one tool call.

As in the reference code, Rehearse is a *separate chat*, not a continuation of the Act context: a
simulator system prompt (envace.roles.prompts) and one user message whose sections are the sample's
candidate tools, few-shot (name, arguments, response) triples from the task's reference conversation,
the conversation transcript, the raw latest Act output and the one call to simulate (the `history`
style for the tiny model keeps the same-tool few-shot, the transcript and the call; `compact` drops the
transcript too; see `rehearse_user_prompt`).
One Rehearse generation per tool call.

Output parsing (`parse_execution_result`, `render_execution_result`) is the one strict parser of the
format in envace.execution_result, re-exported here; its docstring lists the rules and departures.
"""

from __future__ import annotations

import json
from typing import Any

from envace.execution_result import ERROR_KEY, parse_execution_result, render_execution_result
from envace.roles.act import chat_ids
from envace.roles.prompts import (
    SEC_CURRENT,
    SEC_FEW_SHOT,
    SEC_HISTORY,
    SEC_LATEST,
    SEC_TOOLS,
    UNAVAILABLE,
    simulator_system_prompt,
)
from envace.toolcall import render_signature, render_tool_call, schema_of
from envace.types import Message, Task, ToolCall

__all__ = ["ERROR_KEY", "FEW_SHOT_META", "few_shot_triples", "parse_execution_result", "rehearse_messages",
           "rehearse_prompt_ids", "rehearse_user_prompt", "render_execution_result", "transcript",
           "with_training_few_shot"]


def _json_line(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def _tool_response_value(content: str) -> Any:
    """A reference tool message's content as JSON when it is JSON, else the raw string."""
    try:
        return json.loads(content)
    except (json.JSONDecodeError, RecursionError, ValueError, TypeError):
        return content


FEW_SHOT_META = "few_shot_triples"  # Task.meta key: few-shot given from elsewhere (see with_training_few_shot)


def few_shot_triples(task: Task) -> list[tuple[str, dict[str, Any], Any]]:
    """(name, arguments, response) triples of the task's reference conversation.

    Each assistant message's tool calls are paired, in order, with the tool messages that follow it
    (up to the next non-tool message). A call without a response is skipped. When
    `task.meta["few_shot_triples"]` is set, those triples are the few-shot instead (evaluation puts
    training-sample triples there, so a test task's own gold calls and responses never reach Rehearse).
    """
    given = task.meta.get(FEW_SHOT_META)
    if given is not None:
        return [(str(n), dict(a), r) for n, a, r in given]
    triples: list[tuple[str, dict[str, Any], Any]] = []
    msgs = task.messages
    for i, msg in enumerate(msgs):
        if msg.role != "assistant" or not msg.tool_calls:
            continue
        responses: list[Message] = []
        for nxt in msgs[i + 1:]:
            if nxt.role != "tool":
                break
            responses.append(nxt)
        for call, resp in zip(msg.tool_calls, responses):
            triples.append((call.name, call.arguments, _tool_response_value(resp.content)))
    return triples


def with_training_few_shot(tasks: list[Task], train_tasks: list[Task], per_tool: int = 2) -> list[Task]:
    """Copies of `tasks` whose Rehearse few-shot comes from `train_tasks`: for each tool a task offers, the
    first `per_tool` (name, arguments, response) triples of that tool in the training tasks' reference
    conversations (as the reference code draws few-shot from the training sample). Evaluation and
    test-time rehearsal use this so that no test task's gold calls or responses reach a prompt."""
    import dataclasses

    by_tool: dict[str, list[tuple[str, dict[str, Any], Any]]] = {}
    for t in train_tasks:
        for triple in few_shot_triples(t):
            bucket = by_tool.setdefault(triple[0], [])
            if len(bucket) < per_tool:
                bucket.append(triple)
    out = []
    for task in tasks:
        shots = [list(tr) for name in task.tool_names() for tr in by_tool.get(name, [])]
        out.append(dataclasses.replace(task, meta={**task.meta, FEW_SHOT_META: shots}))
    return out


def transcript(history: list[Message]) -> str:
    """The conversation as `User:` / `Assistant:` / `Tool[name]:` lines; the system prompt is skipped."""
    lines: list[str] = []
    for m in history:
        if m.role == "user":
            lines.append(f"User: {m.content}")
        elif m.role == "assistant":
            parts = [m.content] if m.content else []
            parts += [render_tool_call(c) for c in m.tool_calls]
            lines.append("Assistant: " + "\n".join(parts))
        elif m.role == "tool":
            lines.append(f"Tool[{m.name or ''}]: {m.content}")
    return "\n".join(lines)


def rehearse_user_prompt(task: Task, history: list[Message], latest_act_text: str, call: ToolCall, *,
                         few_shot: bool, style: str = "full") -> str:
    """The Rehearse user message.

    `full`: the reference's five sections (whitelist, few-shot, transcript, latest Act output, current
    call), schemas as JSON, joined by blank lines.
    `history` (the embedded default): the paper's ô_t ~ π(·|h_t, a_t, Rehearse) at tiny-model size —
    the few-shot triples of the SAME tool, the conversation transcript h_t, and the current call a_t
    with its one-line signature. Departure from the reference: the whitelist and the raw latest Act
    output are left out (the call is shown; the whitelist costs most of the `full` prompt's tokens).
    `compact` (an ablation): the `history` sections without the transcript — the few-shot of the same
    tool and the call only; in the tool world a response rarely depends on anything else.
    """
    compact = style in ("compact", "history")
    render = render_signature if compact else _json_line
    triples = few_shot_triples(task) if few_shot else []
    if compact:
        triples = [t for t in triples if t[0] == call.name]
    shots = "\n".join(_json_line({"name": n, "arguments": a, "response": r}) for n, a, r in triples) or UNAVAILABLE
    schema = schema_of(task.tools, call.name)
    current = "\n".join([
        f"name: {call.name}",
        f"schema: {render(schema) if schema is not None else UNAVAILABLE}",
        f"arguments: {_json_line(call.arguments)}",
    ])
    if style == "compact":
        sections = [(SEC_FEW_SHOT, shots), (SEC_CURRENT, current)]
    elif style == "history":
        sections = [(SEC_FEW_SHOT, shots), (SEC_HISTORY, transcript(history) or UNAVAILABLE), (SEC_CURRENT, current)]
    else:
        tools = "\n".join(render(t) for t in task.tools)
        sections = [
            (SEC_TOOLS, tools or UNAVAILABLE),
            (SEC_FEW_SHOT, shots),
            (SEC_HISTORY, transcript(history) or UNAVAILABLE),
            (SEC_LATEST, latest_act_text),
            (SEC_CURRENT, current),
        ]
    return "\n\n".join(f"{head}\n{body}" for head, body in sections)


def rehearse_messages(task: Task, history: list[Message], latest_act_text: str, call: ToolCall, *,
                      few_shot: bool, style: str = "full") -> list[dict[str, Any]]:
    """The Rehearse chat (system = simulator prompt, user = the sections) in OpenAI message shape."""
    return [
        {"role": "system", "content": simulator_system_prompt(style)},
        {"role": "user", "content": rehearse_user_prompt(task, history, latest_act_text, call, few_shot=few_shot,
                                                            style=style)},
    ]


def rehearse_prompt_ids(tokenizer: Any, msgs: list[dict[str, Any]], *, enable_thinking: bool = True) -> list[int]:
    """Token ids of the Rehearse chat, with the generation prompt (no tools: the schemas are in the text)."""
    return chat_ids(tokenizer, msgs, enable_thinking=enable_thinking)
