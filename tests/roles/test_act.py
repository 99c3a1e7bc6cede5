"""Act role: prompt ids from the chat template, parsing with schema checks, re-rendered history."""

from __future__ import annotations

import pytest

from envace.roles.act import act_prompt_ids, assistant_message, parse_act, strip_end_markers
from envace.types import ErrorCode, Message, ToolCall

CALL_APPLE = '<tool_call>\n{"name": "get_stock", "arguments": {"item": "apple"}}\n</tool_call>'


def test_act_prompt_ids_are_the_rendered_template(tokenizer, task):
    msgs = task.messages[:2]
    ids = act_prompt_ids(tokenizer, msgs, task.tools)
    text = tokenizer.apply_chat_template([m.to_openai() for m in msgs], tools=task.tools,
                                         add_generation_prompt=True, tokenize=False)
    assert ids == tokenizer.encode(text, add_special_tokens=False)
    assert all(type(t) is int for t in ids)
    decoded = tokenizer.decode(ids)
    assert decoded.endswith("<|im_start|>assistant\n")
    assert '"name": "add_stock"' in decoded and "How many apples and pears?" in decoded


def test_parse_act_valid_calls(task):
    p = parse_act(f"Let me check.\n{CALL_APPLE}\n" + CALL_APPLE.replace("apple", "pear") + "<|im_end|>", task.tools)
    assert p.error is None
    assert [c.key() for c in p.calls] == ['get_stock({"item": "apple"})', 'get_stock({"item": "pear"})']
    assert p.content == "Let me check."


def test_parse_act_final_reply(task):
    p = parse_act("<think>no call needed</think>There are 5 apples.<|im_end|>", task.tools)
    assert p.error is ErrorCode.NO_TOOL_CALL and p.is_final_reply
    assert p.content == "There are 5 apples."


@pytest.mark.parametrize("body, code, detail", [
    ('{"name": "sell", "arguments": {"item": "apple"}}', ErrorCode.UNKNOWN_TOOL, "sell"),
    ('{"name": "get_stock", "arguments": {}}', ErrorCode.INVALID_PARAMETERS, "missing required argument 'item'"),
    ('{"name": "add_stock", "arguments": {"item": "apple", "qty": "3"}}', ErrorCode.INVALID_PARAMETERS,
     "'qty' must be integer"),
    ('{"name": "add_stock", "arguments": {"item": "apple", "qty": true}}', ErrorCode.INVALID_PARAMETERS,
     "'qty' must be integer"),
    ('{"name": "get_stock", "arguments": {"item": "apple", "colour": "red"}}', ErrorCode.INVALID_PARAMETERS,
     "unknown argument 'colour'"),
    ('{"name": "set_mode", "arguments": {"mode": "turbo"}}', ErrorCode.INVALID_PARAMETERS, "must be one of"),
    ('{"name": "get_stock", "arguments": {"item": "apple"}', ErrorCode.JSON_DECODE, "not valid JSON"),
    ('{"arguments": {"item": "apple"}}', ErrorCode.MISSING_NAME, "name"),
])
def test_parse_act_errors(task, body, code, detail):
    p = parse_act(f"<tool_call>\n{body}\n</tool_call>", task.tools)
    assert p.error is code
    assert detail in p.detail


def test_parse_act_one_bad_call_spoils_the_output_but_keeps_the_calls(task):
    bad = '<tool_call>\n{"name": "add_stock", "arguments": {"item": "apple"}}\n</tool_call>'
    p = parse_act(CALL_APPLE + "\n" + bad, task.tools)
    assert p.error is ErrorCode.INVALID_PARAMETERS and p.detail.startswith("add_stock:")
    assert [c.name for c in p.calls] == ["get_stock", "add_stock"]


def test_parse_act_unclosed_block(task):
    assert parse_act("<tool_call>\n{\"name\": \"get_stock\"", task.tools).error is ErrorCode.INVALID_TOOL_CALL_FORMAT


def test_parse_act_optional_enum_argument_may_be_absent(task):
    p = parse_act('<tool_call>{"name": "set_mode", "arguments": {}}</tool_call>', task.tools)
    assert p.error is None and p.calls == [ToolCall("set_mode", {})]


def test_assistant_message_is_re_rendered_canonically(tokenizer, task):
    raw = '<think>hmm</think>  <tool_call>{"arguments":{"item":"apple"},"name":"get_stock"}</tool_call>  '
    msg = assistant_message(parse_act(raw, task.tools), raw)
    assert msg == Message("assistant", "", tool_calls=[ToolCall("get_stock", {"item": "apple"})])
    rendered = tokenizer.decode(act_prompt_ids(tokenizer, task.messages[:2] + [msg], task.tools))
    assert "<|im_start|>assistant\n" + CALL_APPLE + "<|im_end|>" in rendered
    assert '{"arguments":' not in rendered and "hmm" not in rendered


def test_assistant_message_of_a_final_reply(task):
    msg = assistant_message(parse_act("Five.<|im_end|>", task.tools), "Five.<|im_end|>")
    assert msg == Message("assistant", "Five.")


def test_assistant_message_of_malformed_output_keeps_the_visible_raw_text(task):
    raw = '<think>x</think>Trying <tool_call>{"name": "get_stock", "arguments": {}}</tool_call><|im_end|>'
    parsed = parse_act(raw, task.tools)
    assert parsed.error is ErrorCode.INVALID_PARAMETERS
    msg = assistant_message(parsed, raw)
    assert msg.content == 'Trying <tool_call>{"name": "get_stock", "arguments": {}}</tool_call>'
    assert msg.tool_calls == []
    assert assistant_message(parsed).tool_calls == []  # without raw text: no half-valid calls either


def test_strip_end_markers():
    assert strip_end_markers("ok<|im_end|>\n") == "ok"
    assert strip_end_markers("ok <|im_end|><|endoftext|>") == "ok"
    assert strip_end_markers("<|im_end|> in the middle") == "<|im_end|> in the middle"
