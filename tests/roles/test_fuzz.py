"""Arbitrary strings through each role parser: no exception, every output classified.

Two sources per parser: 10,000 strings drawn with a seeded RNG from fragments of the real formats (tags,
JSON pieces, think blocks, end markers), so that the deeper branches of the parsers are reached, not only
"no tag found" (a test below checks that every classification occurs among them); and 1,500 strings from
hypothesis (fully random text, fragments, wrapped fragments), which shrinks a failure to a minimal input.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from envace.roles.act import parse_act
from envace.roles.rehearse import parse_execution_result
from envace.toolcall import tool_schema
from envace.types import ErrorCode, Observation, Role

FRAGMENTS = [
    "<execution_result>", "</execution_result>", "<tool_call>", "</tool_call>", "<think>", "</think>",
    "<|im_end|>", "\n", " ", "{", "}", "[", "]", '"', ":", ",", "null", "NaN", "1e999", "-0", "true",
    '{"name": "get_stock", "arguments": {"item": "apple"}}', '{"name": "add_stock", "arguments": {"qty": "x"}}',
    '{"name": "sell", "arguments": {}}', '{"stock": 5}', "{}", "[]", '"error_tool_call"',
    '{"error_tool_call": {"code": "X", "message": "y"}}', '"parameters"', '"arguments": "{}"',
]
_PIECES = st.lists(st.one_of(st.sampled_from(FRAGMENTS), st.text(max_size=6)), max_size=12).map("".join)
WRAPS = [("", ""), ("<execution_result>\n", "\n</execution_result>"), ("<tool_call>\n", "\n</tool_call>")]
TEXT = st.one_of(
    st.text(max_size=200),
    _PIECES,
    st.tuples(st.sampled_from(WRAPS), _PIECES).map(lambda w: w[0][0] + w[1] + w[0][1]),
)
FUZZ = settings(max_examples=1_500, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

KNOWN = set(ErrorCode)
TOOLS = [tool_schema("get_stock", {"item": {"type": "string"}}),
         tool_schema("add_stock", {"item": {"type": "string"}, "qty": {"type": "integer"}})]


def _check_rehearse(text: str) -> None:
    obs = parse_execution_result(text)
    assert isinstance(obs, Observation) and obs.source is Role.REHEARSE
    if obs.ok:
        assert isinstance(obs.content, (dict, list)) and obs.content != {}
    else:
        assert obs.error in KNOWN and obs.detail
        assert obs.content is None or obs.error is ErrorCode.REHEARSED_ERROR
    obs.to_text()  # always serialisable for the Act history


def _check_act(text: str) -> None:
    parsed = parse_act(text, TOOLS)
    assert parsed.error is None or parsed.error in KNOWN
    if parsed.error is None:
        assert parsed.calls and all(c.name in {"get_stock", "add_stock"} for c in parsed.calls)
    for call in parsed.calls:
        call.key()  # arguments are strict JSON


@FUZZ
@given(TEXT)
def test_parse_execution_result_classifies_everything(text):
    _check_rehearse(text)


@FUZZ
@given(TEXT)
def test_parse_act_classifies_everything(text):
    _check_act(text)


def test_seeded_fragment_strings_are_classified_by_both_parsers():
    for text in _random_strings(10_000, seed=1):
        _check_rehearse(text)
        _check_act(text)


def _random_strings(n: int, seed: int) -> list[str]:
    """The fragment half of TEXT, drawn with a seeded RNG (fast, no shrinking)."""
    import random

    rng = random.Random(seed)
    alphabet = "ab \n{}[]\":,0123456789<>/"
    out = []
    for _ in range(n):
        parts = [rng.choice(FRAGMENTS) if rng.random() < 0.7 else "".join(rng.choices(alphabet, k=rng.randint(0, 4)))
                 for _ in range(rng.randint(0, 8))]
        head, tail = rng.choice(WRAPS)
        out.append(head + "".join(parts) + tail)
    return out


def test_fragment_strings_reach_every_class():
    """The fuzz inputs are not all trivially 'no tag': every classification occurs among 10,000."""
    texts = _random_strings(10_000, seed=0)
    rehearse_seen = {parse_execution_result(t).error for t in texts}
    assert rehearse_seen >= {None, ErrorCode.NO_EXECUTION_RESULT_TAG, ErrorCode.RESULT_JSON_DECODE,
                             ErrorCode.RESULT_EMPTY, ErrorCode.REHEARSED_ERROR}
    act_seen = {parse_act(t, TOOLS).error for t in texts}
    assert act_seen >= {None, ErrorCode.NO_TOOL_CALL, ErrorCode.INVALID_TOOL_CALL_FORMAT, ErrorCode.JSON_DECODE,
                        ErrorCode.MISSING_NAME, ErrorCode.UNKNOWN_TOOL, ErrorCode.INVALID_PARAMETERS}
