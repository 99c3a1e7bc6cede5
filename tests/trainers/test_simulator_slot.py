"""The frozen simulator of `rollout.mode=simulator` as any model slot: a local dir, or an OpenAI-compatible
chat endpoint (how a GTM- or Simia-style trained simulator runs as the act-only arm).

The endpoint is a stand-in, a real HTTP server on 127.0.0.1: a trained tool simulator is a remote model that
cannot exist offline. It answers each Rehearse prompt it is sent with a result computed from the call the
prompt asks it to simulate (plus trailing text after the result block, which the engine must cut), so the
observations the Act role saw, the requests' sampling and their count can be checked independently.
"""

from __future__ import annotations

import json

import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from envace.engines.server import background_server
from envace.execution_result import RESULT_CLOSE, RESULT_OPEN
from envace.roles.prompts import SEC_CURRENT
from envace.rollout.chat_engine import cut_at_stop
from envace.trainers.config import TrainConfig
from envace.trainers.embedded import train
from envace.types import Role


def simulated(name: str, arguments: dict) -> dict:
    return {"simulated": name, "arguments": arguments}


def call_of(prompt: str) -> tuple[str, dict]:
    """(name, arguments) of the call a `full`-style Rehearse prompt asks to simulate."""
    current = prompt.rsplit(f"{SEC_CURRENT}\n", 1)[1]
    name = current.split("name: ", 1)[1].split("\n", 1)[0]
    return name, json.loads(current.rsplit("\narguments: ", 1)[1].strip())


@pytest.fixture
def simulator_endpoint():
    app, requests = FastAPI(), []

    @app.post("/v1/chat/completions")
    async def completions(request: Request) -> JSONResponse:
        body = await request.json()
        requests.append(body)
        name, arguments = call_of(body["messages"][-1]["content"])
        text = f"{RESULT_OPEN}\n{json.dumps(simulated(name, arguments))}\n{RESULT_CLOSE}\nand some chatter after it"
        return JSONResponse({"choices": [{"message": {"role": "assistant", "content": text},
                                          "finish_reason": "stop"}], "usage": {}})

    @app.post("/down/v1/chat/completions")
    async def down(request: Request) -> JSONResponse:
        return JSONResponse({"error": {"message": "simulator overloaded"}}, status_code=503)

    with background_server(app) as url:
        yield url, requests


def _cfg(model_dir, out_dir, **kw):
    base = dict(model=str(model_dir), out_dir=str(out_dir), steps=1, prompts_per_step=3, k=2, save_every=1,
                threads=1, progress=False, data={"n_tasks": 20}, shadow_monitor=False, tracking={"enabled": False},
                rollout={"mode": "simulator", "max_assistant_turns": 3, "act": {"max_new_tokens": 64},
                         "rehearse": {"temperature": 0.7, "max_new_tokens": 40}})
    base.update(kw)
    return TrainConfig.model_validate(base)


def test_an_endpoint_simulator_writes_every_observation(act_sft_dir, tmp_path, simulator_endpoint, scored):
    url, requests = simulator_endpoint
    cfg = _cfg(act_sft_dir, tmp_path / "run", simulator={"base_url": f"{url}/v1", "model": "gtm-sim"})
    train(cfg)
    turns = [t for traj in scored for t in traj.turns if t.role is Role.REHEARSE]
    assert turns, "the SFT'd policy made no tool call: nothing reached the simulator"
    assert len(requests) == len(turns)  # one chat request per simulated call, none unrecorded
    for t in turns:
        assert t.observation.content == simulated(t.call.name, t.call.arguments)
        assert t.text.endswith(RESULT_CLOSE) and "chatter" not in t.text  # cut after the result block
        assert not t.trainable and t.response_ids == []  # frozen: no row, no tokens of the policy
    for body in requests:
        assert body["model"] == "gtm-sim"
        assert body["temperature"] == 0.7 and body["max_tokens"] == 40  # rollout.rehearse's sampling
        assert "stop" not in body and isinstance(body["seed"], int)
    assert len({b["seed"] for b in requests}) == len(requests)  # a seed per call, as for a Rehearse engine


def test_a_failing_simulator_endpoint_stops_the_run(act_sft_dir, tmp_path, simulator_endpoint):
    url, _ = simulator_endpoint
    cfg = _cfg(act_sft_dir, tmp_path / "run",
               simulator={"base_url": f"{url}/down/v1", "model": "gtm-sim", "max_retries": 0})
    with pytest.raises(Exception, match="503|overloaded"):
        train(cfg)


def test_a_local_simulator_slot_is_the_shorthand_s_model(act_sft_dir, tmp_path, scored):
    train(_cfg(act_sft_dir, tmp_path / "a", simulator={"model_dir": str(act_sft_dir)}))
    via_slot = [(t.text, t.call.name) for traj in scored for t in traj.turns if t.role is Role.REHEARSE]
    scored.clear()
    train(_cfg(act_sft_dir, tmp_path / "b", rollout={"mode": "simulator", "simulator_model": str(act_sft_dir),
                                                      "max_assistant_turns": 3, "act": {"max_new_tokens": 64},
                                                      "rehearse": {"temperature": 0.7, "max_new_tokens": 40}}))
    via_shorthand = [(t.text, t.call.name) for traj in scored for t in traj.turns if t.role is Role.REHEARSE]
    assert via_slot and via_slot == via_shorthand  # same seeds, same frozen model: the same simulated text


@pytest.mark.parametrize(("extra", "message"), [
    ({"simulator": {"model_dir": "/m"}, "rollout": {"mode": "simulator", "simulator_model": "/m"}},
     "both simulator .* and rollout.simulator_model"),
    ({"rollout": {"mode": "simulator"}}, "needs a frozen simulator: rollout.simulator_model=DIR"),
    ({"simulator": {"base_url": "http://h:1/v1", "model": "m"}}, "rollout.mode='rehearse' never asks it"),
])
def test_simulator_config_errors_name_the_fix(extra, message):
    with pytest.raises(ValueError, match=message):  # a ConfigError inside pydantic's ValidationError
        TrainConfig.model_validate({"model": "/m", **extra})


def test_cut_at_stop_keeps_the_first_stop_string():
    assert cut_at_stop("a</x>b</x>c", ["</x>"]) == "a</x>"
    assert cut_at_stop("ab<y>c</x>", ["</x>", "<y>"]) == "ab<y>"  # the earliest of several stops
    assert cut_at_stop("no stop here", ["</x>"]) == "no stop here"
    assert cut_at_stop("text", []) == "text"
