"""Rehearsal fidelity of a tool-world evaluation: overall, and on the calls whose response the Rehearse
prompt determines (identical to a reference call shown as few-shot)."""

from __future__ import annotations

import pytest

from envace.evaluation.world import evaluate_world, fidelity
from envace.tts.config import TTSConfig
from envace.types import Message, Mode, Observation, Role, Task, ToolCall, Trajectory, Turn

TASK = Task("t", [], [
    Message("user", "How many apple?"),
    Message("assistant", "", [ToolCall("get_stock", {"item": "apple"})]),
    Message("tool", '{"item": "apple", "stock": 5}', name="get_stock"),
    Message("assistant", "apple: 5"),
])


def _rehearse(call: ToolCall, text: str, real: dict) -> Turn:
    return Turn(role=Role.REHEARSE, prompt_ids=[], response_ids=[], logprobs=[], text=text, temperature=0.0,
                call=call, real_observation=Observation(real))


def _result(obj: str) -> str:
    return f"<execution_result>\n{obj}\n</execution_result>"


def test_fidelity_overall_and_on_determined_calls():
    apple, pear = ToolCall("get_stock", {"item": "apple"}), ToolCall("get_stock", {"item": "pear"})
    traj = Trajectory(TASK, 0, 0, Mode.REHEARSE, turns=[
        _rehearse(apple, _result('{"item": "apple", "stock": 5}'), {"item": "apple", "stock": 5}),  # determined, exact
        _rehearse(apple, _result('{"item": "apple", "stock": 6}'), {"item": "apple", "stock": 5}),  # determined, wrong
        _rehearse(pear, _result('{"item": "pear", "stock": 7}'), {"item": "pear", "stock": 7}),  # guessed right
        _rehearse(pear, "no tag", {"item": "pear", "stock": 7}),  # invalid
    ])
    f = fidelity([traj])
    assert f["pairs"] == 4 and f["determined_pairs"] == 2
    assert f["exact_match"] == 2 / 4 and f["json_valid"] == 3 / 4
    assert f["determined_exact_match"] == 1 / 2 and f["determined_json_valid"] == 1.0
    assert f["per_tool"]["get_stock"]["n"] == 4
    without_few_shot = fidelity([traj], few_shot=False)
    assert without_few_shot["determined_pairs"] == 0 and without_few_shot["exact_match"] == 2 / 4


def test_per_role_engines_cannot_run_test_time_rehearsal():
    with pytest.raises(ValueError, match="one shared engine"):
        evaluate_world({Role.ACT: object(), Role.REHEARSE: object()}, [TASK], None, tts=TTSConfig(n=2))
