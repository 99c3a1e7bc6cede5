"""Rehearse role: the separate simulator chat, its sections, and strict result parsing."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from envace.roles.prompts import (
    COMPACT_SYSTEM_PROMPT,
    FULL_SYSTEM_PROMPT,
    SECTIONS,
)
from envace.roles.rehearse import (
    few_shot_triples,
    parse_execution_result,
    rehearse_messages,
    rehearse_prompt_ids,
    render_execution_result,
    transcript,
)
from envace.types import ErrorCode, Message, Role, Task, ToolCall

LATEST = '<think>check apples</think>\n<tool_call>\n{"name": "get_stock", "arguments": {"item": "apple"}}\n</tool_call>'


def _sections(user: str, expected: tuple[str, ...] = SECTIONS) -> dict[str, str]:
    """Split the user message back into {header: body}, checking order and blank-line joins."""
    blocks = user.split("\n\n")
    out: dict[str, str] = {}
    current = None
    for block in blocks:
        head, _, body = block.partition("\n")
        if head in SECTIONS:
            current = head
            out[head] = body
        else:  # a body that itself holds a blank line
            out[current] += "\n\n" + block
    assert list(out) == list(expected)
    return out


COMPACT_SECTIONS = ("Previous tool calls and results (few-shot):", "Current tool to simulate:")


def test_few_shot_triples_pair_calls_with_following_tool_messages(task):
    assert few_shot_triples(task) == [
        ("get_stock", {"item": "apple"}, {"item": "apple", "stock": 5}),
        ("get_stock", {"item": "pear"}, "pear stock: 7"),
        ("add_stock", {"item": "apple", "qty": 3}, {"item": "apple", "stock": 8}),
    ]


def test_few_shot_skips_a_call_without_response():
    t = Task("t", [], [Message("user", "u"), Message("assistant", "", [ToolCall("f", {})]),
                       Message("user", "v")])
    assert few_shot_triples(t) == []


def test_transcript_lines(task):
    history = task.messages[:5]
    assert transcript(history) == (
        "User: How many apples and pears?\n"
        'Assistant: <tool_call>\n{"name": "get_stock", "arguments": {"item": "apple"}}\n</tool_call>\n'
        '<tool_call>\n{"name": "get_stock", "arguments": {"item": "pear"}}\n</tool_call>\n'
        'Tool[get_stock]: {"item": "apple", "stock": 5}\n'
        "Tool[get_stock]: pear stock: 7"
    )


def test_rehearse_messages_hold_every_section(task):
    call = ToolCall("get_stock", {"item": "apple"})
    msgs = rehearse_messages(task, task.messages[:2], LATEST, call, few_shot=True, style="full")
    assert [m["role"] for m in msgs] == ["system", "user"]
    assert msgs[0]["content"] == FULL_SYSTEM_PROMPT
    sec = _sections(msgs[1]["content"])
    tool_lines = sec["Candidate tools (whitelist for this sample):"].split("\n")
    assert [json.loads(line) for line in tool_lines] == task.tools
    shots = [json.loads(line) for line in sec["Previous tool calls and results (few-shot):"].split("\n")]
    assert shots == [
        {"name": "get_stock", "arguments": {"item": "apple"}, "response": {"item": "apple", "stock": 5}},
        {"name": "get_stock", "arguments": {"item": "pear"}, "response": "pear stock: 7"},
        {"name": "add_stock", "arguments": {"item": "apple", "qty": 3}, "response": {"item": "apple", "stock": 8}},
    ]
    assert sec["Current conversation history:"] == "User: How many apples and pears?"  # system skipped
    assert sec["RL model's latest response:"] == LATEST  # raw, think included
    name, schema, args = sec["Current tool to simulate:"].split("\n")
    assert name == "name: get_stock"
    assert json.loads(schema.removeprefix("schema: ")) == task.tools[0]["function"]
    assert json.loads(args.removeprefix("arguments: ")) == {"item": "apple"}


def test_rehearse_messages_without_few_shot(task):
    call = ToolCall("get_stock", {"item": "apple"})
    msgs = rehearse_messages(task, task.messages[:2], LATEST, call, few_shot=False, style="compact")
    assert msgs[0]["content"] == COMPACT_SYSTEM_PROMPT
    sec = _sections(msgs[1]["content"], COMPACT_SECTIONS)
    assert sec["Previous tool calls and results (few-shot):"] == "<unavailable>"
    assert '"stock": 5' not in msgs[1]["content"]  # no gold response leaks


def test_compact_style_keeps_same_tool_few_shot_and_the_call(task):
    """The tiny model's prompt: only the few-shot triples of the called tool, then the call with its
    one-line signature; no whitelist, transcript or latest Act output."""
    msgs = rehearse_messages(task, task.messages[:2], LATEST, ToolCall("add_stock", {"item": "pear", "qty": 2}),
                             few_shot=True, style="compact")
    sec = _sections(msgs[1]["content"], COMPACT_SECTIONS)
    shots = [json.loads(line) for line in sec["Previous tool calls and results (few-shot):"].split("\n")]
    assert shots == [{"name": "add_stock", "arguments": {"item": "apple", "qty": 3},
                      "response": {"item": "apple", "stock": 8}}]
    name, schema, args = sec["Current tool to simulate:"].split("\n")
    assert (name, args) == ("name: add_stock", 'arguments: {"item": "pear", "qty": 2}')
    assert schema.startswith("schema: add_stock(")
    assert "How many apples" not in msgs[1]["content"] and "think" not in msgs[1]["content"]
    other = rehearse_messages(task, [], "", ToolCall("ghost", {}), few_shot=True, style="compact")
    assert _sections(other[1]["content"], COMPACT_SECTIONS)["Previous tool calls and results (few-shot):"] \
        == "<unavailable>"


def test_few_shot_unavailable_when_the_task_has_no_calls():
    t = Task("t", [], [Message("user", "hi"), Message("assistant", "hello")])
    msgs = rehearse_messages(t, t.messages[:1], "x", ToolCall("ghost", {"a": 1}), few_shot=True)
    sec = _sections(msgs[1]["content"])
    assert sec["Previous tool calls and results (few-shot):"] == "<unavailable>"
    assert sec["Current tool to simulate:"].split("\n")[1] == "schema: <unavailable>"  # not in whitelist


def test_rehearse_prompt_ids_render_the_separate_chat(tokenizer, task):
    msgs = rehearse_messages(task, task.messages[:2], LATEST, ToolCall("get_stock", {"item": "apple"}),
                             few_shot=True, style="compact")
    ids = rehearse_prompt_ids(tokenizer, msgs)
    text = tokenizer.decode(ids)
    assert text == ("<|im_start|>system\n" + COMPACT_SYSTEM_PROMPT + "<|im_end|>\n<|im_start|>user\n"
                    + msgs[1]["content"] + "<|im_end|>\n<|im_start|>assistant\n")
    assert "<tools>" not in text  # schemas travel in the user text, not the template's tools section


def test_unknown_style_is_refused(task):
    with pytest.raises(ValueError, match="'full', 'compact'"):
        rehearse_messages(task, [], "", ToolCall("get_stock", {}), few_shot=True, style="long")


# ----- parsing -----------------------------------------------------------------------------------


@pytest.mark.parametrize("text, content", [
    ('<execution_result>\n{"stock": 5}\n</execution_result>', {"stock": 5}),
    ('\n\n  <execution_result>\n{"stock": 5}\n</execution_result>\n<|im_end|>', {"stock": 5}),
    ('<think>\nit is 5\n</think>\n<execution_result>\n[1, {"a": null}]\n</execution_result>', [1, {"a": None}]),
    ("<execution_result>[]</execution_result>", []),
    ('<execution_result> {"k": "v"} </execution_result>', {"k": "v"}),
])
def test_parse_execution_result_ok(text, content):
    obs = parse_execution_result(text)
    assert obs.ok and obs.content == content and obs.source is Role.REHEARSE


@pytest.mark.parametrize("text, code", [
    ('{"stock": 5}', ErrorCode.NO_EXECUTION_RESULT_TAG),
    ('Sure! <execution_result>\n{"stock": 5}\n</execution_result>', ErrorCode.NO_EXECUTION_RESULT_TAG),
    ('<execution_result>\n{"stock": 5}\n</execution_result> done', ErrorCode.NO_EXECUTION_RESULT_TAG),
    ('<execution_result>\n{"stock": 5}', ErrorCode.NO_EXECUTION_RESULT_TAG),
    ('<think><execution_result>\n{"a": 1}\n</execution_result>', ErrorCode.NO_EXECUTION_RESULT_TAG),
    ("<execution_result></execution_result>", ErrorCode.RESULT_JSON_DECODE),
    ('<execution_result>\n{"stock": 5\n</execution_result>', ErrorCode.RESULT_JSON_DECODE),
    ('<execution_result>\n{"x": NaN}\n</execution_result>', ErrorCode.RESULT_JSON_DECODE),
    ('<execution_result>\n"just text"\n</execution_result>', ErrorCode.RESULT_JSON_DECODE),
    ("<execution_result>\n5\n</execution_result>", ErrorCode.RESULT_JSON_DECODE),
    ('<execution_result>\n{"a":1}\n</execution_result><execution_result>\n{"a":1}\n</execution_result>',
     ErrorCode.RESULT_JSON_DECODE),
    ("<execution_result>\n{}\n</execution_result>", ErrorCode.RESULT_EMPTY),
    ("<execution_result>\nnull\n</execution_result>", ErrorCode.RESULT_EMPTY),
    ("<execution_result>" + "[" * 100_000 + "]" * 100_000 + "</execution_result>", ErrorCode.RESULT_JSON_DECODE),
])
def test_parse_execution_result_failures(text, code):
    obs = parse_execution_result(text)
    assert obs.error is code and obs.content is None and obs.detail
    assert json.loads(obs.to_text())["error_tool_call"]["code"] == code.value


def test_rehearsed_error_keeps_its_content():
    payload = {"error_tool_call": {"code": "INVALID_PARAMETERS", "message": "qty must be integer"}}
    obs = parse_execution_result(render_execution_result(payload))
    assert obs.error is ErrorCode.REHEARSED_ERROR and obs.content == payload
    assert obs.detail == "INVALID_PARAMETERS: qty must be integer"
    listed = parse_execution_result(render_execution_result([{"ok": 1}, payload]))
    assert listed.error is ErrorCode.REHEARSED_ERROR


def test_render_execution_result_exact_text():
    assert render_execution_result({"b": 1, "a": [True, None]}) == (
        '<execution_result>\n{"a": [true, null], "b": 1}\n</execution_result>')


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
_results = st.lists(_json, max_size=4) | st.dictionaries(
    st.text(max_size=8).filter(lambda k: k != "error_tool_call"), _json, min_size=1, max_size=4)


@settings(max_examples=300, deadline=None)
@given(_results)
def test_parse_inverts_render(obj):
    obs = parse_execution_result(render_execution_result(obj))
    assert obs.ok, obs.detail
    assert obs.content == obj
