"""Error-rich Rehearse demonstrations (`SFTConfig.error_demos`): wrong twins of gold calls, answered by the
real tool world from the state the earlier gold calls left; most answers are the world's own errors."""

from __future__ import annotations

import json
import random

import pytest

from envace.execution_result import RESULT_CLOSE, RESULT_OPEN, is_error_value
from envace.models.corpus import task_strings
from envace.models.tokenizer import train_tokenizer
from envace.trainers.config import SFTConfig
from envace.trainers.sft_samples import error_rehearse_samples, wrong_call
from envace.types import ToolCall
from envace.worlds.environment import WorldEnvironment
from envace.worlds.generator import generate_tasks


@pytest.fixture(scope="module")
def world():
    tasks = generate_tasks(30, "train", 0)
    return tasks, train_tokenizer([s for t in tasks for s in task_strings(t)], vocab_size=1024)


def _target(tok, sample):
    text = tok.decode([i for i, t in zip(sample.ids, sample.is_target) if t])
    return json.loads(text.split(RESULT_OPEN, 1)[1].split(RESULT_CLOSE, 1)[0])


def test_twins_are_answered_by_the_real_world(world):
    tasks, tok = world
    total = errors = 0
    for task in tasks:
        samples, n_err = error_rehearse_samples(task, tok, share=1.0, seed=0, few_shot=True, style="history")
        # independently: the world after every gold call before each twin, then the twin itself
        rng = random.Random(f"0|error-demos|{task.uuid}")
        expected, done = [], []
        for m in task.messages:
            for j, call in enumerate(m.tool_calls):
                rng.random()
                twin = wrong_call(call, rng)
                env = WorldEnvironment()
                env.reset(task)
                for c in done + list(m.tool_calls[:j]):
                    env.execute(c)
                expected.append(env.execute(twin).agent_value())
            done += list(m.tool_calls)
        got = [_target(tok, s) for s in samples]
        assert all(g in expected for g in got)
        assert n_err == sum(is_error_value(g) for g in got)
        total, errors = total + len(samples), errors + n_err
    assert total > 20 and errors / total > 0.5  # the world says no to most twins


def test_off_by_default_and_no_world_no_twins(world):
    tasks, tok = world
    assert SFTConfig(model="m").error_demos == 0.0
    assert error_rehearse_samples(tasks[0], tok, share=0.0, seed=0, few_shot=True, style="history") == ([], 0)
    no_world = type(tasks[0])(**{**tasks[0].__dict__, "initial_state": None})
    assert error_rehearse_samples(no_world, tok, share=1.0, seed=0, few_shot=True, style="history") == ([], 0)


def test_wrong_call_changes_one_argument():
    rng = random.Random(0)
    call = ToolCall("transfer", {"src": "a1", "dst": "a2", "amount": 5})
    twin = wrong_call(call, rng)
    changed = [k for k in call.arguments if call.arguments[k] != twin.arguments[k]]
    assert len(changed) == 1 and (twin.arguments[changed[0]] == 5000 or twin.arguments[changed[0]].startswith("zz-"))
    assert wrong_call(ToolCall("list", {}), rng) is None
