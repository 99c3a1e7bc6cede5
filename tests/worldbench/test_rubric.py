"""The rubric judge over real HTTP. The judge is a stand-in server on 127.0.0.1 (a judging LLM cannot run
offline) that grades from the prompt it is sent, by a rule written here: format 5 when the SIMULATED section is
JSON, factuality and quality 5 when it equals the REAL section, fixed middle scores otherwise; so the rescaled
scores of the oracle, `{}` and swapped predictions are known. A judge whose replies never parse (the tiny model
behind a real `envace serve`) and a judge that cannot be reached (HTTP 503) are errors that stop the run, never
zeros; a transition whose verdict alone fails is counted and left out."""

from __future__ import annotations

import json

import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from envace.engines.chat_model import LocalChatModel
from envace.engines.server import background_server, create_app
from envace.engines.slots import ModelSlot
from envace.execution_result import render_execution_result
from envace.worldbench.records import Split
from envace.worldbench.rubric import DIMENSIONS, RubricJudgeError, judge_rows, parse_rubric, summarize_rubric
from envace.worldbench.score import score_transition

EMPTY = "<execution_result>\n{}\n</execution_result>"


def grade(user: str) -> dict[str, int]:
    real = json.loads(user.split("REAL response:\n", 1)[1].split("\n\nSIMULATED response:\n", 1)[0])
    simulated = user.split("\n\nSIMULATED response:\n", 1)[1]
    try:
        sim, valid = json.loads(simulated), True
    except json.JSONDecodeError:
        sim, valid = None, False
    same = valid and sim == real
    return {"format": 5 if valid else 1, "factuality": 5 if same else 1, "consistency": 3, "realism": 4,
            "quality": 5 if same else 2}


@pytest.fixture(scope="module")
def judge_url():
    app, seen = FastAPI(), []

    @app.post("/v1/chat/completions")
    async def completions(request: Request) -> JSONResponse:
        body = await request.json()
        seen.append(body)
        user = body["messages"][-1]["content"]
        text = "no verdict today" if '"id": "garbage"' in user else json.dumps(grade(user))
        return JSONResponse({"choices": [{"message": {"role": "assistant", "content": text},
                                          "finish_reason": "stop"}], "usage": {}})

    @app.post("/down/v1/chat/completions")
    async def down(request: Request) -> JSONResponse:
        seen.append("down")
        return JSONResponse({"error": {"message": "judge overloaded"}}, status_code=503)

    @app.post("/flaky/v1/chat/completions")  # dead for one transition only
    async def flaky(request: Request) -> JSONResponse:
        body = await request.json()
        if '"id": "dead"' in body["messages"][-1]["content"]:
            return JSONResponse({"error": {"message": "judge overloaded"}}, status_code=503)
        return JSONResponse({"choices": [{"message": {"role": "assistant", "content": json.dumps(
            grade(body["messages"][-1]["content"]))}, "finish_reason": "stop"}], "usage": {}})

    with background_server(app) as url:
        yield url, seen


@pytest.fixture(scope="module")
def gold(world_transitions):
    return [t for t in world_transitions if t.split is Split.TEST][:6]


def backend(url, path="/v1"):
    return ModelSlot.endpoint(f"{url}{path}", "judge", max_retries=0).build_judge("judge")


def test_oracle_empty_and_swapped_by_rule(judge_url, gold):
    url, seen = judge_url
    cases = {"oracle": [render_execution_result(t.value) for t in gold], "empty": [EMPTY] * len(gold),
             "swapped": [render_execution_result(gold[(i + 1) % len(gold)].value) for i in range(len(gold))]}
    assert all(gold[i].value != gold[(i + 1) % len(gold)].value for i in range(len(gold)))
    expect = {"oracle": {"format": 1.0, "factuality": 1.0, "consistency": 0.5, "realism": 0.75, "quality": 1.0},
              "empty": {"format": 0.0, "factuality": 0.0, "consistency": 0.5, "realism": 0.75, "quality": 0.25},
              "swapped": {"format": 1.0, "factuality": 0.0, "consistency": 0.5, "realism": 0.75, "quality": 0.25}}
    for name, texts in cases.items():
        rows = [score_transition(t, x) for t, x in zip(gold, texts)]
        res = judge_rows(backend(url), rows, gold, attempts=1)
        summary = summarize_rubric(res, n_boot=50)
        assert {d: summary["all"][d]["mean"] for d in DIMENSIONS} == expect[name], name
        assert summary["n_failed"] == {} and res.requests == len(gold)
    system = seen[-1]["messages"][0]["content"]
    assert all(d in system for d in DIMENSIONS) and seen[-1]["model"] == "judge"


def test_a_transition_without_a_verdict_is_counted_not_scored(judge_url, gold):
    url, _ = judge_url
    bad = gold[1].__class__(**{**gold[1].__dict__, "call": {"name": gold[1].tool, "arguments": {"id": "garbage"}}})
    ts = [gold[0], bad, gold[2]]
    rows = [score_transition(t, render_execution_result(t.value)) for t in ts]
    res = judge_rows(backend(url), rows, ts, attempts=2, sleep=lambda s: None)
    assert [r.id for r, _ in res.scores] == [gold[0].id, gold[2].id]
    assert [(i, k) for i, k, _ in res.failures] == [(bad.id, "unparseable_verdict")] and res.requests == 4
    summary = summarize_rubric(res, n_boot=0)
    assert summary["all"]["factuality"]["n"] == 2 and summary["n_failed"] == {"unparseable_verdict": 1}


def test_an_unreachable_judge_stops_the_run(judge_url, gold):
    url, seen = judge_url
    rows = [score_transition(t, EMPTY) for t in gold[:3]]
    before = seen.count("down")
    with pytest.raises(RubricJudgeError, match="unreachable or refusing.*backend_failure.*503"):
        judge_rows(backend(url, "/down/v1"), rows, gold, attempts=1)
    assert seen.count("down") == before + 1  # it stops at the first transition, nothing is scored past it
    dead = gold[1].__class__(**{**gold[1].__dict__, "call": {"name": gold[1].tool, "arguments": {"id": "dead"}}})
    ts = [gold[0], dead, gold[2]]
    with pytest.raises(RubricJudgeError, match="unreachable or refusing"):  # a judge dead on one transition
        judge_rows(backend(url, "/flaky/v1"), [score_transition(t, EMPTY) for t in ts], ts, attempts=1)


def test_a_judge_that_never_answers_json_stops_the_run(world_tiny_dir, gold):
    chat = LocalChatModel.from_dir(world_tiny_dir, name="tiny", device="cpu")
    with background_server(create_app(chat=chat)) as url:
        slot = ModelSlot.endpoint(f"{url}/v1", "tiny", max_retries=0, max_tokens=8)
        rows = [score_transition(t, EMPTY) for t in gold[:2]]
        with pytest.raises(RubricJudgeError, match="no usable verdict.*unparseable_verdict"):
            judge_rows(slot.build_judge("judge"), rows, gold, attempts=1)


def test_the_cli_exits_non_zero_on_a_dead_judge(judge_url, gold, tmp_path):
    import os
    import subprocess
    import sys

    from envace.worldbench.records import write_transitions

    url, _ = judge_url
    write_transitions(tmp_path / "data" / "world" / "test.jsonl", gold)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("ENVACE_DEBUG", None)
    res = subprocess.run([sys.executable, "-m", "envace.cli", "worldbench", "score", f"data={tmp_path / 'data'}",
                          f"out={tmp_path / 'out'}", f"judge.base_url={url}/down/v1", "judge.model=judge",
                          "judge.max_retries=0", "judge_attempts=1", "tracking.enabled=false"],
                         env=env, capture_output=True, text=True, timeout=600)
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: ") and "503" in lines[0]


@pytest.mark.parametrize("reply", ['{"format": 6, "factuality": 1, "consistency": 1, "realism": 1, "quality": 1}',
                                   '{"format": 2}', "[1, 2]", '{"format": true, "factuality": 1, "consistency": 1, '
                                   '"realism": 1, "quality": 1}', "nothing"])
def test_malformed_verdicts_are_refused(reply):
    with pytest.raises(ValueError):
        parse_rubric(reply)
    assert parse_rubric('```json\n{"format": 2, "factuality": 3, "consistency": 4, "realism": 5, "quality": 1}\n```') \
        == {"format": 2, "factuality": 3, "consistency": 4, "realism": 5, "quality": 1}
