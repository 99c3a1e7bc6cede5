"""WM2Real agreement on held-out tool-world tasks, with hand-built world models whose outcomes are worked out
from the tasks themselves:
- the oracle (the real answers: the gold conversation as recorded, or envace.rollout.oracle's engine in the
  rollout's simulator seat) agrees on task success and end state everywhere;
- `{}` (every call answered with an empty result, which the rollout reads as an error): the rehearsed world
  refused every call, so its end state is the initial one; it agrees with the real end state exactly where the
  calls change nothing, and its verdict is never a success;
- a swapped response (another task's real, non-error response) accepts every call as the real world does: the
  outcomes agree though the contents are wrong (what BehR sees and WM2Real does not).
Act is the gold plan of tests/scripted_episodes.py where a rollout runs."""

from __future__ import annotations

import numpy as np
import pytest
from scripted_episodes import ScriptedAct

from envace.engines.base import GenResult
from envace.execution_result import parse_execution_result
from envace.rollout.oracle import OracleRehearser
from envace.types import Message, Mode, Trajectory
from envace.worldbench.wm2real import (
    REFUSED,
    answered_calls,
    episode_agreement,
    rehearsed_episodes,
    summarize_wm2real,
    wm2real_tasks,
)
from envace.worlds.environment import WorldEnvironment
from envace.worlds.registry import get_domain

EMPTY = "<execution_result>\n{}\n</execution_result>"
ROLLOUT = dict(rehearse_style="full", max_context_tokens=4096, max_new_tokens=200)  # the oracle engine reads `full`


@pytest.fixture(scope="module")
def tasks():
    return wm2real_tasks(8)


def unchanged_by(task, calls) -> bool:
    """Whether running `calls` on the task's initial state leaves it as it was (the domain's own replay)."""
    domain = get_domain(task.domain)
    return domain.verifier.replay(task.initial_state, calls).to_dict() == \
        domain.db_cls.from_dict(task.initial_state).to_dict()


def gold_calls(task):
    return [c for m in task.messages for c in m.tool_calls]


def with_tool_texts(task, texts):
    it = iter(texts)
    return Trajectory(task, 0, 0, Mode.REHEARSE,
                      messages=[Message("tool", next(it), name=m.name) if m.role == "tool" else m
                                for m in task.messages])


def test_hand_built_world_models(tasks):
    empty = parse_execution_result(EMPTY).to_text()
    for i, task in enumerate(tasks):
        n_tool = sum(m.role == "tool" for m in task.messages)
        oracle = episode_agreement(Trajectory(task, 0, 0, Mode.REHEARSE, messages=list(task.messages)))
        assert oracle.success_agree and oracle.end_state_agree
        assert oracle.rehearsed_success and oracle.real_success and oracle.verified_success
        assert not oracle.false_positive
        assert oracle.calls == len(gold_calls(task)) and oracle.rehearsed_refused == oracle.real_refused == 0

        nothing = episode_agreement(with_tool_texts(task, [empty] * n_tool))
        assert nothing.rehearsed_refused == nothing.calls and nothing.real_refused == 0
        assert not nothing.rehearsed_success and nothing.real_success and not nothing.success_agree
        assert nothing.end_state_agree == unchanged_by(task, gold_calls(task))

        other = tasks[(i + 1) % len(tasks)]
        donor = [m.content for m in other.messages if m.role == "tool"]
        swapped = episode_agreement(with_tool_texts(task, [donor[j % len(donor)] for j in range(n_tool)]))
        assert swapped.success_agree and swapped.end_state_agree and swapped.rehearsed_refused == 0
    assert any(not unchanged_by(t, gold_calls(t)) for t in tasks)  # the `{}` end-state check can fail here


class EmptyWorld:
    """A world model that answers every call with an empty result."""

    chat = False

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer

    def generate(self, requests):
        ids = self.tokenizer.encode(EMPTY, add_special_tokens=False)
        return [GenResult(token_ids=ids, logprobs=[0.0] * len(ids), text=EMPTY, finish_reason="stop")
                for _ in requests]


def test_rollout_episodes_with_the_oracle_and_the_empty_world(tasks, frozen):
    tok = frozen.tokenizer
    act = ScriptedAct.for_tasks(tok, tasks, "gold")
    oracle = [episode_agreement(t, s) for s in (0, 1)
              for t in rehearsed_episodes(act, OracleRehearser(tok, tasks, WorldEnvironment), tasks, s, **ROLLOUT)]
    assert all(e.success_agree and e.end_state_agree and e.verified_success for e in oracle)
    assert [e.calls for e in oracle[:len(tasks)]] == [len(gold_calls(t)) for t in tasks]
    summary = summarize_wm2real([oracle[:len(tasks)], oracle[len(tasks):]], n_boot=100)
    assert summary["success_agree"]["mean"] == summary["end_state_agree"]["mean"] == 1.0
    assert summary["success_agree"]["seed_t"] == [1.0, 1.0] and summary["tasks"] == len(tasks)
    assert summary["calls"] == 2 * sum(len(gold_calls(t)) for t in tasks)

    found = [episode_agreement(t) for t in rehearsed_episodes(act, EmptyWorld(tok), tasks, 0, **ROLLOUT)]
    for task, e in zip(tasks, found):
        first = next(m.tool_calls for m in task.messages if m.tool_calls)  # a rehearsed error ends the episode
        assert e.termination == "rehearse_error" and e.calls == e.rehearsed_refused == len(first)
        assert e.end_state_agree == unchanged_by(task, first)
        # the real transcript passes its checklist only when that first message was the whole task and no
        # answer had to be stated
        one_message = sum(bool(m.tool_calls) for m in task.messages) == 1
        assert e.real_success == (one_message and not any(task.meta["answers"]))
        assert not e.rehearsed_success and e.success_agree == (not e.real_success)
    rates = summarize_wm2real([found], n_boot=0)
    assert rates["end_state_agree"]["mean"] == pytest.approx(np.mean([e.end_state_agree for e in found]))
    assert rates["end_state_agree"]["ci"] is None and "seed_t" not in rates["end_state_agree"]


def test_answered_calls_pair_in_order_and_skip_parser_errors():
    from envace.types import ToolCall

    a, b = ToolCall("get", {"id": 1}), ToolCall("put", {"id": 2})
    msgs = [Message("user", "hi"), Message("assistant", "", [a, b]), Message("tool", "x", name="get"),
            Message("tool", "y", name="put"), Message("assistant", "<tool_call>{"), Message("tool", "bad call")]
    assert answered_calls(msgs) == [(a, "x"), (b, "y")]


def test_seeds_must_cover_the_same_tasks_and_other_sources_are_refused(tasks):
    one = episode_agreement(Trajectory(tasks[0], 0, 0, Mode.REHEARSE, messages=list(tasks[0].messages)))
    two = episode_agreement(Trajectory(tasks[1], 0, 0, Mode.REHEARSE, messages=list(tasks[1].messages)))
    with pytest.raises(ValueError, match="same tasks"):
        summarize_wm2real([[one], [two]])
    assert set(REFUSED) == {"tau2", "bfcl", "vita"} and all(REFUSED.values())
