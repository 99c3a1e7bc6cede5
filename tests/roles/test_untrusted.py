"""The shared sanitising step (envace.untrusted) and what the parsers do with it: lone surrogates never
reach a tokenizer, strict JSON only (`1e400` is not infinity), and the linear
tag scanners agree with the regular expressions they replace on seeded random inputs."""

from __future__ import annotations

import json
import random
import re

import pytest

from envace.execution_result import parse_execution_result, render_execution_result
from envace.roles.act import assistant_message, chat_ids, parse_act
from envace.toolcall import parse_tool_calls, split_blocks, strip_end_markers, strip_think, tool_schema
from envace.types import ErrorCode, Observation, Role
from envace.untrusted import (
    MAX_INT_DIGITS,
    MAX_JSON_DEPTH,
    MAX_OUTPUT_CHARS,
    MAX_TOOL_CALLS,
    StrictJSONError,
    clean_observation,
    clean_text,
    has_surrogate,
    loads_strict,
)

TOOLS = [tool_schema("get_stock", {"item": {"type": "string"}})]
LONE = "\ud83d"  # the high half of an emoji's surrogate pair, alone
ESCAPED = "\\ud83d"  # the same as a JSON escape: grammatical JSON, not Unicode text


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


# ----- the sanitising step itself ------------------------------------------------------------------


def test_clean_text_replaces_each_lone_surrogate_and_keeps_everything_else():
    assert clean_text("ok") == "ok"
    assert clean_text(f"a{LONE}b") == "a\ufffdb"
    assert clean_text(f"{LONE}\udc00é😀") == "\ufffd\ufffdé😀"  # two lone halves are two characters here
    text = "naïve 😀 text"
    assert clean_text(text) is text  # valid text is returned as is, no copy
    assert has_surrogate(f"x{LONE}") and not has_surrogate("😀")


@pytest.mark.parametrize("text, syntax, reason", [
    ('{"a": 1e400}', False, "overflows a double"),
    ('[-1e400]', False, "overflows a double"),
    ('{"a": NaN}', False, "non-finite number NaN"),
    ('[Infinity]', False, "non-finite number Infinity"),
    (f'{{"a": "{ESCAPED}"}}', False, "lone surrogate"),
    (f'{{"{ESCAPED}": 1}}', False, "key holds a lone surrogate"),
    ("[" * (MAX_JSON_DEPTH + 1) + "]" * (MAX_JSON_DEPTH + 1), False, "nested deeper"),
    ("[" * 100_000 + "]" * 100_000, False, "nested deeper"),
    ("[" + "9" * (MAX_INT_DIGITS + 1) + "]", False, "digits"),
    ('{"a": 1', True, "Expecting"),
    ("", True, "Expecting value"),
])
def test_loads_strict_rejects_with_a_reason(text, syntax, reason):
    with pytest.raises(StrictJSONError, match=reason) as info:
        loads_strict(text)
    assert info.value.syntax is syntax


def test_loads_strict_accepts_strict_json_unchanged():
    deepest = "[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH
    assert loads_strict(deepest) == json.loads(deepest)
    text = '{"a": [1, -2.5e300, "😀", "\\ud83d\\ude00", null, true], "b": {"c": "' + "9" * MAX_INT_DIGITS + '"}}'
    assert loads_strict(text) == json.loads(text)
    assert loads_strict("[" + "9" * MAX_INT_DIGITS + "]") == [int("9" * MAX_INT_DIGITS)]
    assert loads_strict('["\\\\ud83d"]') == ["\\ud83d"]  # an escaped backslash, then plain letters: fine


def test_clean_observation_cleans_keys_values_and_detail():
    obs = Observation(content={f"k{LONE}": [f"v{LONE}", 1]}, error=ErrorCode.TOOL_ERROR, detail=f"bad {LONE}")
    out = clean_observation(obs)
    assert out.content == {"k\ufffd": ["v\ufffd", 1]} and out.detail == "bad \ufffd"
    assert out.error is ErrorCode.TOOL_ERROR and out.source is Role.ENV
    fine = Observation(content={"a": ["b"]})
    assert clean_observation(fine) is fine


# ----- a lone surrogate is classified, never handed to the tokenizer ---------------------------------


def test_tool_call_with_a_lone_surrogate_escape_is_classified(tokenizer):
    text = f'<tool_call>\n{{"name": "get_stock", "arguments": {{"item": "{ESCAPED}"}}}}\n</tool_call>'
    parsed = parse_act(text, TOOLS)
    assert parsed.error is ErrorCode.NON_SERIALIZABLE_ARGUMENTS and not parsed.calls
    assert "lone surrogate" in parsed.detail
    # the history entry the rollout builds from it tokenises (it holds the escape text, not the code point)
    msg = assistant_message(parsed, text)
    assert chat_ids(tokenizer, [{"role": "user", "content": "x"}, msg.to_openai()], tools=TOOLS)
    # the same in OpenAI style (arguments as a JSON string) and in the name
    as_string = json.dumps({"name": "get_stock", "arguments": json.dumps({"item": LONE})})
    assert parse_act(f"<tool_call>{as_string}</tool_call>", TOOLS).error is ErrorCode.NON_SERIALIZABLE_ARGUMENTS
    in_name = f'<tool_call>{{"name": "get{ESCAPED}", "arguments": {{}}}}</tool_call>'
    assert parse_tool_calls(in_name).error is ErrorCode.NON_SERIALIZABLE_ARGUMENTS


def test_raw_lone_surrogates_in_model_text_are_replaced_not_fatal(tokenizer):
    # a chat engine can hand back a str holding a lone code point (JSON "\ud83d" in its HTTP answer)
    text = f'{LONE}<tool_call>\n{{"name": "get_stock", "arguments": {{"item": "a{LONE}"}}}}\n</tool_call>'
    parsed = parse_act(text, TOOLS)
    assert parsed.error is None and parsed.calls[0].arguments == {"item": "a\ufffd"}
    assert parsed.content == "\ufffd"
    bad = assistant_message(parse_act(f"<tool_call>{LONE}</tool_call>", TOOLS), f"<tool_call>{LONE}</tool_call>")
    assert _encodable(bad.content)
    chat_ids(tokenizer, [{"role": "user", "content": "x"}, bad.to_openai()], tools=TOOLS)


@pytest.mark.parametrize("text", [
    f'<execution_result>\n{{"item": "{ESCAPED}"}}\n</execution_result>',
    f'<execution_result>\n[{{"{ESCAPED}": 1}}]\n</execution_result>',
])
def test_execution_result_with_a_lone_surrogate_is_classified(text):
    obs = parse_execution_result(text)
    assert obs.error is ErrorCode.RESULT_JSON_DECODE and obs.content is None and "lone surrogate" in obs.detail
    assert _encodable(obs.to_text())


def test_execution_result_raw_surrogate_is_replaced():
    obs = parse_execution_result(f'<execution_result>\n{{"item": "a{LONE}"}}\n</execution_result>')
    assert obs.ok and obs.content == {"item": "a\ufffd"}


# ----- parsing: strict JSON only -------------------------------------------------------------------


@pytest.mark.parametrize("number", ["1e400", "-1e400", "1E999", "123456789e301"])
def test_overflowing_numbers_are_not_infinity(number):
    obs = parse_execution_result(f'<execution_result>\n{{"stock": {number}}}\n</execution_result>')
    assert obs.error is ErrorCode.RESULT_JSON_DECODE and obs.content is None and "overflows" in obs.detail
    act = parse_act(f'<tool_call>{{"name": "get_stock", "arguments": {{"item": {number}}}}}</tool_call>', TOOLS)
    assert act.error is ErrorCode.NON_SERIALIZABLE_ARGUMENTS


def test_tiny_and_large_finite_numbers_stay_accepted():
    obs = parse_execution_result('<execution_result>\n{"a": 1e-400, "b": 1.7e308, "c": -0.0}\n</execution_result>')
    assert obs.ok and obs.content == {"a": 0.0, "b": 1.7e308, "c": 0.0}


def test_oversized_outputs_are_classified_without_scanning():
    big = "x" * (MAX_OUTPUT_CHARS + 1)
    assert parse_act(big, TOOLS).error is ErrorCode.OUTPUT_TOO_LONG
    assert parse_execution_result(big).error is ErrorCode.OUTPUT_TOO_LONG


def test_error_details_are_short():
    name = "n" * 10_000
    parsed = parse_act(f'<tool_call>{{"name": "{name}", "arguments": {{}}}}</tool_call>', TOOLS)
    assert parsed.error is ErrorCode.UNKNOWN_TOOL and len(parsed.detail) <= 300


# ----- the linear scanners against the regular expressions they replace ----------------------------

_THINK_RE = re.compile(r"<think>.*?</think>", re.DOTALL)
_CALL_RE = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)


def _strip_think_regex(text: str) -> str:
    """The former implementation (quadratic on repeated openers): the reference semantics."""
    text = _THINK_RE.sub("", text)
    if "<think>" in text:
        text = text.split("<think>", 1)[0]
    return text.replace("</think>", "")


def _strip_end_markers_loop(text: str) -> str:
    """The former implementation (quadratic on many trailing markers)."""
    out = text.rstrip()
    changed = True
    while changed:
        changed = False
        for marker in ("<|im_end|>", "<|endoftext|>"):
            if out.endswith(marker):
                out = out[: -len(marker)].rstrip()
                changed = True
    return out


_PIECES = ["<think>", "</think>", "<tool_call>", "</tool_call>", "<|im_end|>", "<|endoftext|>", "<thi", "nk>",
           "<tool_", "call>", "</", " ", "\n", "a", "b", "{}", "<|im_", "end|>"]


def _random_texts(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return ["".join(rng.choice(_PIECES) for _ in range(rng.randint(0, 24))) for _ in range(n)]


def test_linear_scanners_match_the_regex_reference_on_random_inputs():
    texts = _random_texts(20_000, seed=1)
    for text in texts:
        assert strip_think(text) == _strip_think_regex(text), text
        assert split_blocks(text) == (_CALL_RE.findall(text), _CALL_RE.sub("", text)), text
        assert strip_end_markers(text) == _strip_end_markers_loop(text), text
    # the random texts do reach the interesting cases
    assert sum("<think>" in t and "</think>" in t for t in texts) > 2500
    assert sum(len(_CALL_RE.findall(t)) > 1 for t in texts) > 100
    assert sum(_strip_end_markers_loop(t) != t.rstrip() for t in texts) > 1200


def test_render_and_parse_round_trip_on_strict_values():
    for obj in ({"a": [1, 2.5, "x😀"]}, [{"deep": [[[]]]}], {"n": int("9" * MAX_INT_DIGITS)}):
        assert parse_execution_result(render_execution_result(obj)).content == obj


def test_too_many_calls_in_one_output_is_a_format_error():
    call = '<tool_call>{"name": "get_stock", "arguments": {"item": "a"}}</tool_call>'
    assert parse_act(call * MAX_TOOL_CALLS, TOOLS).error is None
    parsed = parse_act(call * (MAX_TOOL_CALLS + 1), TOOLS)
    assert parsed.error is ErrorCode.INVALID_TOOL_CALL_FORMAT and "over the limit" in parsed.detail


def test_a_rehearsed_error_key_written_with_escapes_is_still_an_error():
    obs = parse_execution_result('<execution_result>\n{"\\u0065rror_tool_call": {"code": "X"}}\n</execution_result>')
    assert obs.error is ErrorCode.REHEARSED_ERROR and obs.detail == "X"
