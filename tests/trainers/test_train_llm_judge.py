"""The embedded trainer with the LLM checklist judge (reward=checklist_llm), built once per run from the
`judge` model slot.

- A real local judge: the random tiny model as a local model dir (served in-process), and the same model
  behind `envace serve`'s app on 127.0.0.1 as an endpoint slot. A random model rarely writes a verdict, so
  what is checked is the plumbing: every trajectory is either scored or a classified judge error whose
  rows carry no advantage, and the judge counters match the trajectories.
- A stand-in judge endpoint, a real HTTP server on 127.0.0.1: the reference judge is a remote LLM
  (Qwen3-30B-A3B on vLLM), which cannot exist offline. It answers, per trajectory (keyed by the first user
  turn of the transcript it is shown), a passing verdict, unparseable text or HTTP 503, so the expected
  rewards, error kinds, judge-call counts and group baselines can be computed here independently.
"""

from __future__ import annotations

import hashlib
import math
from collections import defaultdict

import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from envace.conversation import is_error_result, split_turns
from envace.engines.server import background_server
from envace.rewards.checklist import JudgeErrorKind
from envace.rewards.llm_judge import render_transcript
from envace.trainers.config import TrainConfig
from envace.trainers.embedded import train
from envace.types import TerminationReason

ATTEMPTS = 2
LONG_CONTEXT = 32768  # judge prompts hold the whole transcript: past the tiny model's 1024 positions


def _cfg(model_dir, out_dir, judge, **kw):
    base = dict(model=str(model_dir), out_dir=str(out_dir), steps=2, prompts_per_step=2, k=2, save_every=2,
                threads=1, progress=False, data={"n_tasks": 20}, shadow_monitor=False, tracking={"enabled": False},
                rollout={"max_assistant_turns": 2, "act": {"max_new_tokens": 16}, "rehearse": {"max_new_tokens": 16}},
                reward="checklist_llm", judge=judge, judge_attempts=ATTEMPTS, judge_retry_delay_s=0.0)
    base.update(kw)
    return TrainConfig.model_validate(base)


def _check_unscored_rows_and_counters(trajs, history):
    errors = [t for t in trajs if t.reward is None]
    for t in trajs:
        if t.reward is None:
            assert t.termination is TerminationReason.JUDGE_ERROR
            err = t.reward_breakdown["judge_error"]
            assert err["kind"] in {k.value for k in JudgeErrorKind} - {JudgeErrorKind.RULE.value}
            assert err["attempts"] == ATTEMPTS and err["error"]
            assert all(u.advantage == 0.0 for u in t.turns if u.trainable and u.response_ids)  # out of baselines
        else:
            assert 0.0 <= t.reward <= 1.0 and t.reward_breakdown["source"] == "checklist_llm"
    assert sum(h["reward/unscored"] for h in history) == len(errors)
    assert sum(h["judge/failed_items"] for h in history) == len(errors)
    per_step = len(trajs) // len(history)
    assert all(h["judge/calls"] >= per_step for h in history)  # every trajectory asks at least one item
    assert all(math.isfinite(h["loss"]) for h in history if "loss" in h)


def test_local_dir_judge_trains_two_steps(tiny_model_dir, tmp_path, scored):
    judge = {"model_dir": str(tiny_model_dir), "max_tokens": 16}
    res = train(_cfg(tiny_model_dir, tmp_path / "run", judge))
    assert res.last_step == 2 and len(scored) == 2 * 2 * 2
    _check_unscored_rows_and_counters(scored, res.history)


def test_endpoint_judge_over_envace_serve(tiny_model_dir, tmp_path, scored):
    from envace.engines.chat_model import LocalChatModel
    from envace.engines.server import create_app

    chat = LocalChatModel.from_dir(tiny_model_dir, name="tiny-judge", device="cpu")
    with background_server(create_app(chat=chat, max_model_len=LONG_CONTEXT)) as url:
        judge = {"base_url": f"{url}/v1", "model": "tiny-judge", "max_tokens": 16, "max_retries": 0}
        res = train(_cfg(tiny_model_dir, tmp_path / "run", judge, steps=1))
    assert res.last_step == 1 and len(scored) == 2 * 2
    _check_unscored_rows_and_counters(scored, res.history)


# --- stand-in judge endpoint -------------------------------------------------------------------------

PASS, GARBAGE, DOWN = "pass", "garbage", "down"
VERDICT = '{"analysis_of_focus": "seen", "analysis_of_pass_condition": "met", "answer": true}'


def first_turn(transcript: str) -> str:
    """The first user turn of a rendered transcript: the same for every judge request of one trajectory."""
    start = transcript.index("--- user turn 1 ---")
    end = [i for i in (transcript.find("--- user turn 2 ---", start), transcript.find("\n\nChecklist item", start))
           if i >= 0]
    return transcript[start:min(end) if end else len(transcript)].strip()


def behaviour(section: str) -> str:
    return (PASS, GARBAGE, DOWN)[int(hashlib.sha256(section.encode()).hexdigest(), 16) % 3]


@pytest.fixture
def stand_in_judge():
    app, requests = FastAPI(), []

    @app.post("/v1/chat/completions")
    async def completions(request: Request) -> JSONResponse:
        body = await request.json()
        mode = behaviour(first_turn(body["messages"][-1]["content"]))
        requests.append(mode)
        if mode == DOWN:
            return JSONResponse({"error": {"message": "judge overloaded"}}, status_code=503)
        text = VERDICT if mode == PASS else "I think the assistant did fine."
        return JSONResponse({"choices": [{"message": {"role": "assistant", "content": text},
                                          "finish_reason": "stop"}], "usage": {}})

    with background_server(app) as url:
        yield url, requests


def expected_reward(traj) -> float:
    """Every item passes: a turn scores its weights (1 per turn in the tool world) unless one of its tool
    results is an error; turns never reached score 0; mean over the task's user turns."""
    n_turns = len(traj.task.checklists)
    users = [i for i, m in enumerate(traj.messages) if m.role == "user"][:n_turns]
    total = 0.0
    for j, start in enumerate(users):
        end = users[j + 1] if j + 1 < len(users) else len(traj.messages)
        failed = any(m.role == "tool" and is_error_result(m.content) for m in traj.messages[start:end])
        total += 0.0 if failed else sum(it.weight for it in traj.task.checklists[j])
    return total / n_turns


def test_stand_in_endpoint_verdicts_errors_and_baselines(tiny_model_dir, tmp_path, scored, stand_in_judge):
    url, requests = stand_in_judge
    judge = {"base_url": url, "model": "stand-in", "max_retries": 0}
    res = train(_cfg(tiny_model_dir, tmp_path / "run", judge, k=4))
    assert res.last_step == 2 and len(scored) == 2 * 2 * 4
    modes = [behaviour(first_turn(render_transcript(split_turns(t.messages), 0))) for t in scored]
    assert {PASS, GARBAGE, DOWN} <= set(modes)  # the seeds give every behaviour (deterministic)

    calls = 0
    for t, mode in zip(scored, modes, strict=True):
        if mode == PASS:
            assert t.reward == pytest.approx(expected_reward(t)) and t.termination is not TerminationReason.JUDGE_ERROR
            reached = min(len(split_turns(t.messages)), len(t.task.checklists))
            calls += sum(len(items) for items in t.task.checklists[:reached])  # one call per item
        else:
            assert t.reward is None and t.termination is TerminationReason.JUDGE_ERROR
            kind = JudgeErrorKind.UNPARSEABLE if mode == GARBAGE else JudgeErrorKind.BACKEND
            assert t.reward_breakdown["judge_error"]["kind"] == kind.value, t.reward_breakdown["judge_error"]
            assert t.reward_breakdown["judge_error"]["attempts"] == ATTEMPTS
            calls += ATTEMPTS  # the first item fails every attempt; later items are never asked
    assert len(requests) == calls == sum(h["judge/calls"] for h in res.history)
    n_garbage, n_down = modes.count(GARBAGE), modes.count(DOWN)
    assert sum(h["judge/failed_items_unparseable_verdict"] for h in res.history) == n_garbage
    assert sum(h["judge/failed_items_backend_failure"] for h in res.history) == n_down
    assert sum(h["judge/failed_attempts_unparseable_verdict"] for h in res.history) == ATTEMPTS * n_garbage
    assert sum(h["reward/unscored"] for h in res.history) == n_garbage + n_down

    # baselines: per (step, prompt, role), the mean over rows of scored trajectories only (role_grpo, per_output)
    groups = defaultdict(list)
    for i, t in enumerate(scored):
        step = i // (2 * 4)
        for u in t.turns:
            if u.trainable and u.response_ids:
                groups[(step, t.prompt_index, u.role)].append((t, u))
    mixed = 0
    for members in groups.values():
        rewards = [t.reward for t, _ in members if t.reward is not None]
        mixed += bool(rewards) and len(rewards) < len(members)
        for t, u in members:
            want = 0.0 if t.reward is None else t.reward - sum(rewards) / len(rewards)
            assert u.advantage == pytest.approx(want, abs=1e-6)
    assert mixed >= 1  # some group held scored and judge-error trajectories together


def test_judge_config_errors_name_the_field_and_the_fix(tiny_model_dir, tmp_path, monkeypatch):
    with pytest.raises(ValueError, match=r"checklist_llm' needs a judge: set judge.model_dir=DIR"):
        _cfg(tiny_model_dir, tmp_path, None)
    with pytest.raises(ValueError, match=r"judge is set but reward='checklist_rule' never asks it"):
        _cfg(tiny_model_dir, tmp_path, {"model_dir": str(tiny_model_dir)}, reward="checklist_rule")
    monkeypatch.delenv("ENVACE_TEST_JUDGE_KEY", raising=False)
    cfg = _cfg(tiny_model_dir, tmp_path / "run", {"base_url": "http://127.0.0.1:9/v1", "model": "judge",
                                                  "api_key_env": "ENVACE_TEST_JUDGE_KEY"})
    with pytest.raises(ValueError, match=r"judge.api_key_env: environment variable ENVACE_TEST_JUDGE_KEY"):
        train(cfg)  # before any model is loaded or any step runs
    assert not (tmp_path / "run" / "checkpoints").exists()
