"""One parser per format: the rollout's observation, the fidelity verdict and the
store's `observation` / `rehearsed` columns all come from `parse_execution_result`, so they cannot
contradict each other. Before, fidelity read Rehearse text leniently (first block anywhere, or bare
JSON) and marked prose-wrapped, bare and scalar outputs `json_valid` while the rollout rejected them."""

from __future__ import annotations

import json

import pytest

from envace.execution_result import parse_execution_result
from envace.fidelity import fidelity_metrics, parse_rehearsed
from envace.roles import rehearse
from envace.store.models import TrajectoryMode
from envace.store.rows import PAIR_COLUMNS, TURN_COLUMNS, to_bundle
from envace.types import Mode, Observation, Role, Task, ToolCall, Trajectory, Turn

REAL = {"item": "apple", "stock": 5}
BLOCK = '<execution_result>\n{"item": "apple", "stock": 5}\n</execution_result>'

# (text, accepted as a value): the first five were json_valid=True under the former lenient reading
CASES = [
    ("Sure! " + BLOCK, False),  # prose before the block
    (BLOCK + " hope that helps", False),  # text after it
    ('{"item": "apple", "stock": 5}', False),  # bare JSON, no tags
    ("<execution_result>\n5\n</execution_result>", False),  # a scalar
    (BLOCK + BLOCK, False),  # two blocks
    ("<execution_result>\n{}\n</execution_result>", False),  # empty
    ('<execution_result>\n{"stock": 1e400}\n</execution_result>', False),  # not strict JSON
    ("", False),
    (BLOCK, True),
    ("<think>look it up</think>\n" + BLOCK + "<|im_end|>", True),
    ('<execution_result>\n{"error_tool_call": {"code": "X", "message": "no"}}\n</execution_result>', True),
]


@pytest.mark.parametrize("text, accepted", CASES)
def test_fidelity_reads_rehearse_text_exactly_as_the_rollout_does(text, accepted):
    obs = parse_execution_result(text)
    assert (obs.content is not None) is accepted
    assert parse_rehearsed(text) == (accepted, obs.content)
    scores = fidelity_metrics(text, REAL)
    assert scores["json_valid"] is accepted
    assert scores["exact_match"] is (accepted and obs.content == REAL)


def test_the_role_module_reexports_the_one_parser():
    assert rehearse.parse_execution_result is parse_execution_result


def test_a_turns_stored_parse_is_used_not_a_second_reading():
    # an observation that disagrees with the text on purpose: the stored parse must win
    parsed = Observation(content={"from": "turn"}, source=Role.REHEARSE)
    assert parse_rehearsed("not even a block", parsed) == (True, {"from": "turn"})
    assert parse_rehearsed(BLOCK, Observation(content=None, source=Role.REHEARSE,
                                              error=parse_execution_result("").error)) == (False, None)


def _bundle(texts: list[str]):
    call = ToolCall("get_stock", {"item": "apple"})
    task = Task(uuid="t", tools=[], messages=[])
    traj = Trajectory(task=task, prompt_index=0, sample_index=0, mode=Mode.REHEARSE)
    for text in texts:
        obs = parse_execution_result(text)  # what the rollout stores on the turn
        traj.turns.append(Turn(role=Role.REHEARSE, prompt_ids=[1], response_ids=[2], logprobs=[-0.1], text=text,
                               temperature=1.0, call=call, observation=obs,
                               parse_error=obs.error if obs.content is None else None,
                               real_observation=Observation(content=REAL)))
    return to_bundle(traj, run_id="r", step=0, mode=TrajectoryMode.EVAL, split="eval")


def test_store_columns_observation_and_rehearsed_agree():
    texts = [t for t, _ in CASES]
    bundle = _bundle(texts)
    turns = {row[TURN_COLUMNS.index("turn_index")]: row for row in bundle.turns}
    assert len(bundle.pairs) == len(texts)
    for text, pair in zip(texts, bundle.pairs):
        turn = turns[pair[PAIR_COLUMNS.index("turn_index")]]
        observation = json.loads(turn[TURN_COLUMNS.index("observation")])
        rehearsed_json = pair[PAIR_COLUMNS.index("rehearsed")]
        rehearsed = None if rehearsed_json is None else json.loads(rehearsed_json)
        assert rehearsed == observation["content"], text
        assert pair[PAIR_COLUMNS.index("json_valid")] is (observation["content"] is not None), text
        assert (turn[TURN_COLUMNS.index("parse_error")] is None) is (observation["content"] is not None), text
