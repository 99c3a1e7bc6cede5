"""The tiny model's chat template against hand-written Qwen3-layout strings."""

from __future__ import annotations

import pytest

from envace.toolcall import parse_tool_calls, render_tool_call
from envace.types import Message, ToolCall

TOOL = {"type": "function", "function": {"name": "get_stock", "description": "Units in stock.",
                                         "parameters": {"type": "object",
                                                        "properties": {"item": {"type": "string"}},
                                                        "required": ["item"]}}}
TOOL_LINE = ('{"type": "function", "function": {"name": "get_stock", "description": "Units in stock.", '
             '"parameters": {"type": "object", "properties": {"item": {"type": "string"}}, "required": ["item"]}}}')
FOOTER = ('</tools>\n\nTo call one, answer with:\n<tool_call>\n'
          '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call><|im_end|>\n')


@pytest.fixture(scope="module")
def tok(corpus):
    from envace.models.tokenizer import train_tokenizer

    return train_tokenizer(corpus[:20], vocab_size=300)


def render(tok, messages, **kw):
    return tok.apply_chat_template(messages, tokenize=False, **kw)


def test_full_conversation_with_tools(tok):
    messages = [
        {"role": "system", "content": "You run a shop."},
        {"role": "user", "content": "Stock of apple and pear?"},
        {"role": "assistant", "content": "",
         "tool_calls": [{"type": "function", "function": {"name": "get_stock", "arguments": {"item": "apple"}}},
                        {"type": "function", "function": {"name": "get_stock", "arguments": '{"item": "pear"}'}}]},
        {"role": "tool", "content": '{"stock": 4}'},
        {"role": "tool", "content": '{"stock": 7}'},
        {"role": "assistant", "content": "4 and 7."},
        {"role": "user", "content": "Thanks"},
    ]
    expected = (
        "<|im_start|>system\nYou run a shop.\n\n# Tools\n\nYou may call these functions:\n<tools>\n"
        + TOOL_LINE + "\n" + FOOTER
        + "<|im_start|>user\nStock of apple and pear?<|im_end|>\n"
        "<|im_start|>assistant\n"
        '<tool_call>\n{"name": "get_stock", "arguments": {"item": "apple"}}\n</tool_call>\n'
        '<tool_call>\n{"name": "get_stock", "arguments": {"item": "pear"}}\n</tool_call><|im_end|>\n'
        "<|im_start|>user\n<tool_response>\n{\"stock\": 4}\n</tool_response>\n"
        "<tool_response>\n{\"stock\": 7}\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n4 and 7.<|im_end|>\n"
        "<|im_start|>user\nThanks<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    assert render(tok, messages, tools=[TOOL], add_generation_prompt=True) == expected
    # enable_thinking is accepted and changes nothing
    assert render(tok, messages, tools=[TOOL], add_generation_prompt=True, enable_thinking=False) == expected
    assert render(tok, messages, tools=[TOOL], add_generation_prompt=True, enable_thinking=True) == expected


def test_tools_without_system_message(tok):
    out = render(tok, [{"role": "user", "content": "hi"}], tools=[TOOL])
    assert out == ("<|im_start|>system\n# Tools\n\nYou may call these functions:\n<tools>\n" + TOOL_LINE + "\n"
                   + FOOTER + "<|im_start|>user\nhi<|im_end|>\n")


def test_no_tools_plain_chatml(tok):
    out = render(tok, [{"role": "system", "content": "S"}, {"role": "user", "content": "hi"},
                       {"role": "assistant", "content": "yo"}])
    assert out == ("<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n"
                   "<|im_start|>assistant\nyo<|im_end|>\n")


def test_content_before_call_and_single_tool_turn(tok):
    call = ToolCall("get_stock", {"item": "rice", "n": [1, 2]})
    messages = [Message("user", "q").to_openai(), Message("assistant", "Checking.", [call]).to_openai(),
                Message("tool", '{"stock": 0}', name="get_stock").to_openai()]
    out = render(tok, messages, add_generation_prompt=True)
    assert out == ("<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\nChecking.\n"
                   + render_tool_call(call) + "<|im_end|>\n"
                   "<|im_start|>user\n<tool_response>\n{\"stock\": 0}\n</tool_response><|im_end|>\n"
                   "<|im_start|>assistant\n")


def test_rendered_calls_parse_back(tok):
    calls = [ToolCall("get_stock", {"item": "é 漢"}), ToolCall("add", {"a": 1, "b": -2.5})]
    out = render(tok, [Message("assistant", "", calls).to_openai()])
    body = out.removeprefix("<|im_start|>assistant\n").removesuffix("<|im_end|>\n")
    parsed = parse_tool_calls(body, ["get_stock", "add"])
    assert parsed.error is None
    assert [(c.name, c.arguments) for c in parsed.calls] == [(c.name, c.arguments) for c in calls]
    assert body == render_tool_call(calls[0]) + "\n" + render_tool_call(calls[1])


def test_signature_template_prints_tools_as_render_signature():
    """The embedded default prints each tool as one signature line, exactly as the compact Rehearse
    prompt does (envace.toolcall.render_signature), keeping Qwen3's surrounding layout."""
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    from envace.models.chat_template import CHAT_TEMPLATE_COMPACT
    from envace.toolcall import render_signature, tool_schema

    tools = [tool_schema("get_stock", {"item": {"type": "string"}}, description="Stock of an item."),
             tool_schema("add", {"a": {"type": "integer"}, "b": {"type": "integer"}})]
    out = ImmutableSandboxedEnvironment().from_string(CHAT_TEMPLATE_COMPACT).render(
        messages=[{"role": "system", "content": "S"}, {"role": "user", "content": "U"}], tools=tools,
        add_generation_prompt=True)
    assert render_signature(tools[0]) == "get_stock(item: string) - Stock of an item."
    assert render_signature(tools[1]) == "add(a: integer, b: integer)"
    expected = ("<|im_start|>system\nS\n\n# Tools\n<tools>\nget_stock(item: string) - Stock of an item."
                "\nadd(a: integer, b: integer)\n</tools><|im_end|>\n"
                "<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n")
    assert out == expected
