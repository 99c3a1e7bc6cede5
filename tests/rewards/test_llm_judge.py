"""LLM checklist judge against local deterministic backends.

The real judge is a remote LLM (e.g. Qwen3-30B-A3B behind an OpenAI-compatible server), which cannot
exist offline; these backends stand in for it. They implement the same `chat` protocol and answer from
a table of expected verdicts, so the judge's plumbing (prompting, schema, parsing, retries, gating,
scoring) is what is under test.
"""

import copy
import re

import pytest

from envace.conversation import split_turns
from envace.rewards import JudgeSettings, LLMJudge, RewardSource, score_rule, score_trajectory
from envace.rewards.checklist import JudgeErrorKind
from envace.rewards.llm_judge import VERDICT_SCHEMA, parse_verdict
from envace.rewards.rule_judge import check_rule
from envace.types import TerminationReason, ToolCall
from envace.worlds import generate_tasks


class TableBackend:
    """Answers each (turn, question) from a precomputed table; records every request."""

    def __init__(self, table):
        self.table = table
        self.requests = []

    def chat(self, messages, *, json_schema, temperature):
        self.requests.append((messages, json_schema, temperature))
        user = messages[-1]["content"]
        turn = int(re.search(r"Checklist item for user turn (\d+)", user).group(1)) - 1
        question = re.search(r"^Question: (.*)$", user, re.M).group(1)
        answer = self.table[(turn, question)]
        return '{"analysis_of_focus": "looked", "analysis_of_pass_condition": "checked", "answer": %s}' % (
            "true" if answer else "false")


class FlakyBackend(TableBackend):
    """Fails twice (a transport error, then unparseable text) before each good answer."""

    def __init__(self, table):
        super().__init__(table)
        self.n = 0

    def chat(self, messages, *, json_schema, temperature):
        self.n += 1
        if self.n % 3 == 1:
            raise ConnectionError("judge server unreachable")
        if self.n % 3 == 2:
            return "I think it passes."
        return super().chat(messages, json_schema=json_schema, temperature=temperature)


class GarbageBackend:
    def __init__(self):
        self.calls = 0

    def chat(self, messages, *, json_schema, temperature):
        self.calls += 1
        return '{"answer": "yes"}'


def table_for(task, messages):
    turns = split_turns(messages)
    return {(t, it.question): (t < len(turns) and check_rule(it.extra_info["rule"], turns[t]))
            for t, items in enumerate(task.checklists) for it in items}


@pytest.fixture(scope="module")
def two_turn():
    return next(t for t in generate_tasks(18, "train", seed=2) if t.meta["shape"] == "two_turn" and t.domain == "shop")


def test_judge_agrees_with_rules_and_sends_the_schema(two_turn, traj):
    wrong = copy.deepcopy(two_turn.messages)
    i = [k for k, m in enumerate(wrong) if m.tool_calls][-1]
    wrong[i].tool_calls[0] = ToolCall("cancel_order", {"order": "o99"})
    for messages in (two_turn.messages, wrong):
        backend = TableBackend(table_for(two_turn, messages))
        judge = LLMJudge(backend, JudgeSettings(temperature=0.3), sleep=lambda s: None)
        s = judge.score(traj(two_turn, messages))
        assert s.score == pytest.approx(score_rule(traj(two_turn, messages)).score)
        n_items = sum(len(turn) for turn in two_turn.checklists)
        assert len(backend.requests) == n_items  # one call per (turn, item)
        _, schema, temp = backend.requests[0]
        assert schema is VERDICT_SCHEMA and schema["properties"]["answer"] == {"type": "boolean"} and temp == 0.3
    # last loop = the wrong one: turn 1 scores 1.0, turn 2's only item (the cancel call) failed: (1 + 0) / 2
    assert s.score == pytest.approx(0.5)


def test_required_failure_stops_judging(two_turn, traj):
    wrong = copy.deepcopy(two_turn.messages)
    i = next(k for k, m in enumerate(wrong) if m.tool_calls)
    wrong[i].tool_calls[0] = ToolCall("find_order", {"customer": "zed"})
    backend = TableBackend(table_for(two_turn, wrong))
    s = LLMJudge(backend, sleep=lambda s: None).score(traj(two_turn, wrong))
    assert s.terminated_at == 0
    assert len(backend.requests) == len(two_turn.checklists[0])  # turn 2 never judged


def test_retries_with_exponential_backoff_then_answers(two_turn, traj):
    sleeps = []
    backend = FlakyBackend(table_for(two_turn, two_turn.messages))
    judge = LLMJudge(backend, JudgeSettings(attempts=3, base_delay_s=0.5), sleep=sleeps.append)
    s = judge.score(traj(two_turn))
    n_items = sum(len(turn) for turn in two_turn.checklists)
    assert s.score == 1.0 and s.judge_error is None
    assert backend.n == 3 * n_items and judge.calls == 3 * n_items
    assert sleeps == [0.5, 1.0] * n_items
    # each item: one transport failure, one unparseable reply, then a verdict; no item failed outright
    assert judge.failed_attempts == {JudgeErrorKind.BACKEND: n_items, JudgeErrorKind.UNPARSEABLE: n_items}
    assert not judge.failed_items and judge.metrics()["judge/calls"] == 3 * n_items


def test_garbage_is_a_recorded_judge_error_never_a_zero(two_turn, traj):
    sleeps = []
    backend = GarbageBackend()
    judge = LLMJudge(backend, JudgeSettings(attempts=4, base_delay_s=1.0, max_delay_s=3.0), sleep=sleeps.append)
    s = judge.score(traj(two_turn))
    assert s.score is None
    assert s.judge_error.turn == 0 and s.judge_error.item_id == two_turn.checklists[0][0].id
    assert s.judge_error.attempts == 4 and "boolean 'answer'" in s.judge_error.error
    assert s.judge_error.kind is JudgeErrorKind.UNPARSEABLE
    assert s.breakdown()["judge_error"]["kind"] == "unparseable_verdict"
    assert judge.failed_items == {JudgeErrorKind.UNPARSEABLE: 1} and judge.metrics()["judge/failed_items"] == 1.0
    assert backend.calls == 4 and sleeps == [1.0, 2.0, 3.0]  # capped at max_delay_s
    t = traj(two_turn)
    r = score_trajectory(t, RewardSource.CHECKLIST_LLM, judge=LLMJudge(GarbageBackend(), sleep=lambda s: None))
    r.apply_to(t)
    assert r.reward is None and t.reward is None and t.termination is TerminationReason.JUDGE_ERROR


def test_backend_with_complete_is_asked_through_it(two_turn, traj):
    class ClientLike:  # the shape of envace.engines.openai_client: chat() returns a rich result
        def __init__(self, table):
            self.inner = TableBackend(table)

        def chat(self, *a, **k):
            raise AssertionError("the judge must use complete()")

        def complete(self, messages, *, json_schema=None, temperature=0.0):
            return self.inner.chat(messages, json_schema=json_schema, temperature=temperature)

    s = LLMJudge(ClientLike(table_for(two_turn, two_turn.messages)), sleep=lambda s: None).score(traj(two_turn))
    assert s.score == 1.0


def test_a_backend_that_always_raises_is_a_backend_failure(two_turn, traj):
    class Down:
        def chat(self, messages, *, json_schema, temperature):
            raise ConnectionError("judge endpoint refused the connection")

    judge = LLMJudge(Down(), JudgeSettings(attempts=3), sleep=lambda s: None)
    s = judge.score(traj(two_turn))
    assert s.score is None and s.judge_error.kind is JudgeErrorKind.BACKEND and s.judge_error.attempts == 3
    assert "ConnectionError: judge endpoint refused" in s.judge_error.error
    assert judge.failed_attempts == {JudgeErrorKind.BACKEND: 3} and judge.failed_items == {JudgeErrorKind.BACKEND: 1}


def test_parse_verdict():
    fenced = '```json\n{"analysis_of_focus": "", "analysis_of_pass_condition": "", "answer": false}\n```'
    assert parse_verdict(fenced) is False
    for bad in ('{"answer": "yes"}', "[true]", "true", "", None):
        with pytest.raises(ValueError):
            parse_verdict(bad)


def test_settings_validate():
    with pytest.raises(ValueError, match="attempts"):
        JudgeSettings(attempts=0)
