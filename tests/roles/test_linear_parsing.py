"""Parsing cost grows linearly on adversarial model output.

No test here asserts seconds: each compares the parser's cost on an input with its cost on the same
input four times as long, measured back to back in the same process (best of several runs, a few
attempts). Linear code gives a ratio near 4; the former lazy-regex / copy-per-marker code gave ~16
(quadratic). The bound, 8, sits between the two. Absolute times on 1 MB inputs are printed by
bench/parse_bench.py.
"""

from __future__ import annotations

import timeit
from collections.abc import Callable

import pytest

from envace.execution_result import parse_execution_result
from envace.fidelity import parse_rehearsed
from envace.roles.act import parse_act
from envace.toolcall import parse_tool_calls, tool_schema

TOOLS = [tool_schema("get_stock", {"item": {"type": "string"}})]
CALL = '<tool_call>{"name": "get_stock", "arguments": {"item": "apple"}}</tool_call>'
RESULT = '<execution_result>{"stock": 5}</execution_result>'
GROWTH = 4
BOUND = 8.0

CASES: dict[str, tuple[Callable[[str], object], Callable[[int], str], int]] = {
    # name: (parser, input of size n, n)
    "tool_call openers": (parse_tool_calls, lambda n: "<tool_call>" * n, 500),
    "think openers": (parse_tool_calls, lambda n: "<think>" * n, 800),
    "think openers, act": (lambda t: parse_act(t, TOOLS), lambda n: "<think>" * n + CALL, 800),
    "trailing end markers, act": (lambda t: parse_act(t, TOOLS), lambda n: CALL + "<|im_end|>" * n, 10_000),
    "trailing end markers, rehearse": (parse_execution_result, lambda n: RESULT + " <|im_end|>" * n, 10_000),
    "result openers, rehearse": (parse_execution_result, lambda n: "<execution_result>" * n, 2_000),
    "result openers, fidelity": (parse_rehearsed, lambda n: "<execution_result>" * n, 2_000),
    "unclosed call blocks": (parse_tool_calls, lambda n: (CALL[:-12] + "</tool_cal") * n, 500),
}


def _cost(fn: Callable[[str], object], text: str, number: int) -> float:
    return min(timeit.repeat(lambda: fn(text), repeat=5, number=number)) / number


def growth_ratio(fn: Callable[[str], object], make: Callable[[int], str], n: int) -> float:
    """cost(GROWTH * n) / cost(n); the small input is repeated enough to take >= ~5 ms per run."""
    small, large = make(n), make(GROWTH * n)
    fn(small)  # warm-up (imports, regex compilation)
    once = _cost(fn, small, 1)
    number = max(1, int(0.005 / max(once, 1e-7)))
    return _cost(fn, large, number) / _cost(fn, small, number)


@pytest.mark.parametrize("name", list(CASES))
def test_parsing_cost_grows_linearly(name):
    fn, make, n = CASES[name]
    ratios = []
    for _ in range(3):  # a busy machine can spoil one measurement; a quadratic parser fails all three
        ratios.append(growth_ratio(fn, make, n))
        if ratios[-1] < BOUND:
            break
    assert min(ratios) < BOUND, f"{name}: cost x{min(ratios):.1f} for x{GROWTH} input (linear ~{GROWTH})"
