"""Rehearse system prompts: both styles state the same rules; compact is short."""

from __future__ import annotations

import pytest

from envace.roles.prompts import COMPACT_SYSTEM_PROMPT, FULL_SYSTEM_PROMPT, simulator_system_prompt

RULE_MARKERS = ["INVALID_TOOL_CALL_FORMAT", "TOOL_NOT_AVAILABLE", "INVALID_PARAMETERS", "error_tool_call",
                "<execution_result>", "</execution_result>", "few-shot"]


@pytest.mark.parametrize("style", ["full", "compact", "history"])
def test_every_style_states_the_rules(style):
    text = simulator_system_prompt(style)
    for marker in RULE_MARKERS:
        assert marker in text, (style, marker)
    # the codes appear in the order the checks run: format, then name, then arguments
    positions = [text.index(m) for m in RULE_MARKERS[:3]]
    assert positions == sorted(positions)


def test_full_prompt_numbers_the_five_steps():
    for i in range(1, 6):
        assert f"\n{i}. " in FULL_SYSTEM_PROMPT


def test_compact_prompt_is_short(tokenizer):
    assert len(COMPACT_SYSTEM_PROMPT.splitlines()) <= 2
    full, compact = (len(tokenizer.encode(t, add_special_tokens=False))
                     for t in (FULL_SYSTEM_PROMPT, COMPACT_SYSTEM_PROMPT))
    assert compact * 3 < full, (compact, full)


def test_unknown_style():
    with pytest.raises(ValueError, match="unknown rehearse prompt style 'terse'"):
        simulator_system_prompt("terse")
