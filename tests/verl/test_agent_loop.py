"""The envace agent loop on CPU against verl's real classes: instantiated the way verl's AgentLoopWorker
does (hydra.utils.instantiate of the registry entry), fed rows from verl's own RLHFDataset, generating
through a scripted server manager that returns verl's real TokenOutput (see conftest: the LLM servers
need GPUs). Expected prompts are rebuilt independently from the task's reference conversation."""

from __future__ import annotations

import json

import httpx
import pytest

from envace.roles.act import act_prompt_ids
from envace.roles.rehearse import few_shot_triples, rehearse_messages, rehearse_prompt_ids, render_execution_result
from envace.toolcall import render_tool_call
from envace.trainers.verl.config import EndpointConfig, LoopSettings, RoleSampling
from envace.types import Message
from envace.worlds.environment import WorldEnvironment

pytestmark = pytest.mark.verl

TWO_CALLS = 3  # tasks[3]: one user turn, two calls in one Act message, then a reply
TWO_TURNS = 5  # tasks[5]: two user turns, one call each


@pytest.fixture
def count_env(monkeypatch):
    """Counts real tool-world executions (the rehearse mode must make none)."""
    counts = {"execute": 0, "reset": 0}
    real_execute, real_reset = WorldEnvironment.execute, WorldEnvironment.reset

    def execute(self, call):
        counts["execute"] += 1
        return real_execute(self, call)

    def reset(self, task):
        counts["reset"] += 1
        return real_reset(self, task)

    monkeypatch.setattr(WorldEnvironment, "execute", execute)
    monkeypatch.setattr(WorldEnvironment, "reset", reset)
    return counts


def role_loop(**kw):
    return LoopSettings(act=RoleSampling(temperature=0.7, top_p=0.9, max_tokens=64),
                        rehearse=RoleSampling(temperature=0.3, top_p=0.8, max_tokens=48), **kw)


def test_rehearse_mode_rows(run_session, verl_api, verl_config_factory, rl_dataset, world_tasks, tokenizer,
                            scripted_server, count_env):
    task = world_tasks[TWO_CALLS]
    config = verl_config_factory(loop=role_loop())
    server = scripted_server(task)
    outputs = run_session(config, server, tokenizer, rl_dataset[TWO_CALLS])

    assert all(isinstance(o, verl_api["agent_loop"].AgentLoopOutput) for o in outputs)
    assert [o.extra_fields["role"] for o in outputs] == ["act", "rehearse", "rehearse", "act"]
    assert [o.extra_fields["turn_index"] for o in outputs] == [0, 1, 2, 3]
    # each row records the temperature it was sampled at: the trainer's log-probs use it
    assert [o.extra_fields["temperature"] for o in outputs] == [0.7, 0.3, 0.3, 0.7]
    assert {o.extra_fields["trajectory_id"] for o in outputs} == {"uid-a_0"}
    assert count_env == {"execute": 0, "reset": 0}  # the policy wrote every observation

    system_user = task.messages[:2]
    calls = task.messages[2].tool_calls
    act0 = "\n".join(render_tool_call(c) for c in calls)
    expected_prompts = [act_prompt_ids(tokenizer, system_user, task.tools)]
    for call in calls:
        msgs = rehearse_messages(task, system_user, act0, call, few_shot=True, style="full")
        expected_prompts.append(rehearse_prompt_ids(tokenizer, msgs))
    # after two rehearsed results the Act history is exactly the reference conversation so far
    expected_prompts.append(act_prompt_ids(tokenizer, task.messages[:5], task.tools))
    assert [o.prompt_ids for o in outputs] == expected_prompts
    for out, call in zip(outputs, server.calls):
        assert out.response_ids == call["response_ids"]
        assert out.response_mask == [1] * len(out.response_ids)
        assert out.response_logprobs == pytest.approx(call["logprobs"])
        assert out.reward_score == 1.0  # the reference path passes its whole checklist
        assert out.extra_fields["envace_scored"] is True
    assert outputs[-1].extra_fields["reward_extra_info"]["score"] == 1.0
    assert json.loads(outputs[-1].extra_fields["envace_breakdown"])["source"] == "checklist_rule"

    # per-role sampling reached the server on every call; seeds differ call to call
    for call in server.calls:
        sp = call["sampling_params"]
        want = (0.7, 0.9, 64, ["<|im_end|>"]) if call["kind"] == "act" else (0.3, 0.8, 48, ["</execution_result>"])
        assert (sp["temperature"], sp["top_p"], sp["max_tokens"], sp["stop"]) == want
        assert sp["top_k"] == -1 and sp["logprobs"] is True
    assert len({c["sampling_params"]["seed"] for c in server.calls}) == len(server.calls)


def test_sessions_differ_and_rows_fit_verl_tensors(run_session, verl_config_factory, rl_dataset, world_tasks,
                                                   tokenizer, scripted_server):
    task = world_tasks[TWO_CALLS]
    config = verl_config_factory()
    a = scripted_server(task)
    b = scripted_server(task)
    out_a = run_session(config, a, tokenizer, rl_dataset[TWO_CALLS], session_id=0)
    out_b = run_session(config, b, tokenizer, rl_dataset[TWO_CALLS], session_id=1)
    seeds = lambda s: [c["sampling_params"]["seed"] for c in s.calls]  # noqa: E731
    assert set(seeds(a)).isdisjoint(seeds(b))
    assert out_b[0].extra_fields["trajectory_id"] == "uid-a_1"
    # verl's own conversion to training tensors (what the V1 adapter stores) accepts every row
    for out in out_a:
        d = out.as_dict()
        assert d["responses"].shape == d["response_mask"].shape == d["rollout_log_probs"].shape
        assert float(d["rm_scores"][-1]) == 1.0 and float(d["rm_scores"][:-1].abs().sum()) == 0.0


def test_env_mode_real_world_executes(run_session, verl_config_factory, rl_dataset, world_tasks, tokenizer,
                                      scripted_server, count_env, gold_act_texts):
    task = world_tasks[TWO_TURNS]
    config = verl_config_factory(loop=LoopSettings(mode="env", reward="env_state"))
    server = scripted_server(task)
    outputs = run_session(config, server, tokenizer, rl_dataset[TWO_TURNS])

    n_calls = sum(len(m.tool_calls) for m in task.messages)
    # the rollout's world executed every call; the end-state verifier then replays them on a fresh world
    assert count_env == {"execute": 2 * n_calls, "reset": 2}
    assert outputs[-1].extra_fields["reward_extra_info"]["env_calls"] == n_calls
    assert [o.extra_fields["role"] for o in outputs] == ["act"] * len(gold_act_texts(task))
    # every Act prompt is the reference conversation up to that point: the real world answered the calls
    cuts = [i for i, m in enumerate(task.messages) if m.role == "assistant"]
    assert [o.prompt_ids for o in outputs] == [act_prompt_ids(tokenizer, task.messages[:i], task.tools) for i in cuts]
    assert all(o.reward_score == 1.0 for o in outputs)
    assert json.loads(outputs[-1].extra_fields["envace_breakdown"])["state_ok"] is True


def test_env_mode_wrong_answer_scores_zero(run_session, verl_config_factory, rl_dataset, world_tasks, tokenizer,
                                           scripted_server, gold_act_texts):
    task = world_tasks[TWO_TURNS]
    config = verl_config_factory(loop=LoopSettings(mode="env", reward="env_state"))
    texts = gold_act_texts(task)
    wrong = [c for m in task.messages for c in m.tool_calls][-1]  # the turn-2 write (a transfer)
    wrong = type(wrong)(wrong.name, {**wrong.arguments, "amount": wrong.arguments["amount"] + 1})
    texts[2] = render_tool_call(wrong)  # a different amount: the end state differs from the gold one
    outputs = run_session(config, scripted_server(task, texts), tokenizer, rl_dataset[TWO_TURNS])
    assert len(outputs) == len(texts)
    assert [o.reward_score for o in outputs] == [0.0] * len(texts)
    assert all(o.extra_fields["envace_scored"] for o in outputs)
    assert json.loads(outputs[-1].extra_fields["envace_breakdown"])["state_ok"] is False


def test_simulator_mode_frozen_calls_are_not_rows(run_session, verl_config_factory, rl_dataset, world_tasks,
                                                  tokenizer, scripted_server, count_env, monkeypatch):
    """The frozen simulator is an OpenAI-compatible /v1/completions endpoint; here an httpx MockTransport
    stands in for that server (no second model server can run on this machine)."""
    import envace.trainers.verl.agent_loop as loop_mod
    from envace.trainers.verl.bridge import CompletionsEngine

    task = world_tasks[TWO_CALLS]
    requests = []

    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        requests.append(body)
        tail = body["prompt"].split("Current tool to simulate:", 1)[1]
        name = tail.split("name: ", 1)[1].split("\n", 1)[0].strip()
        args = json.loads(tail.split("arguments: ", 1)[1].split("\n", 1)[0].split("<|im_end|>")[0])
        resp = next(r for n, a, r in few_shot_triples(task) if n == name and a == args)
        return httpx.Response(200, json={"choices": [{"text": render_execution_result(resp), "finish_reason": "stop"}]})

    monkeypatch.setattr(loop_mod, "_SIMULATORS", {})
    monkeypatch.setattr(loop_mod, "CompletionsEngine",
                        lambda ep, tok: CompletionsEngine(ep, tok, transport=httpx.MockTransport(handler)))
    sim = EndpointConfig(base_url="http://sim-host:8000", model="frozen-sim")
    config = verl_config_factory(loop=LoopSettings(mode="simulator", simulator=sim))
    server = scripted_server(task)
    outputs = run_session(config, server, tokenizer, rl_dataset[TWO_CALLS])

    assert [o.extra_fields["role"] for o in outputs] == ["act", "act"]
    assert [c["kind"] for c in server.calls] == ["act", "act"]  # the policy never played Rehearse
    assert len(requests) == 2 and all(r["model"] == "frozen-sim" for r in requests)
    assert requests[0]["stop"] == ["</execution_result>"]
    assert count_env["execute"] == 0
    assert outputs[1].prompt_ids == act_prompt_ids(tokenizer, task.messages[:5], task.tools)
    assert all(o.reward_score == 1.0 for o in outputs)


def test_bad_row_fails_with_field_message(run_session, verl_config_factory, rl_dataset, world_tasks, tokenizer,
                                          scripted_server):
    from envace.data.errors import DataError

    sample = dict(rl_dataset[TWO_CALLS])
    sample["extra_info"] = {**sample["extra_info"], "tools": "not json"}
    with pytest.raises(DataError, match="extra_info.tools"):
        run_session(verl_config_factory(), scripted_server(world_tasks[TWO_CALLS]), tokenizer, sample)


def test_v0_trainer_is_refused(run_session, verl_config_factory, rl_dataset, world_tasks, tokenizer, scripted_server):
    from hydra.errors import InstantiationException  # how verl's worker sees the loop's ValueError

    config = verl_config_factory("trainer.use_v1=false")
    with pytest.raises(InstantiationException, match="use_v1=true"):
        run_session(config, scripted_server(world_tasks[0]), tokenizer, rl_dataset[0])


def test_real_tiny_model_behind_the_server(run_session, verl_api, verl_config_factory, rl_dataset, world_tasks,
                                           tmp_path):
    """A real (randomly initialised) tiny Qwen3 model generates; its TokenOutputs become the rows."""
    from envace.engines.base import GenRequest
    from envace.engines.hf import HFEngine
    from envace.models.corpus import task_strings
    from envace.models.loading import load_policy
    from envace.models.tiny import TinyModelConfig, init_tiny_model

    model_dir = init_tiny_model([s for t in world_tasks for s in task_strings(t)], tmp_path / "tiny",
                                TinyModelConfig(vocab_size=700))
    model, tok = load_policy(model_dir, device="cpu")
    engine = HFEngine(model, tok, device="cpu")
    seen = []

    class TinyServer:
        async def generate(self, request_id, *, prompt_ids, sampling_params, **kw):
            req = GenRequest(prompt_ids=prompt_ids, temperature=sampling_params["temperature"],
                             top_p=sampling_params["top_p"], max_new_tokens=sampling_params["max_tokens"],
                             stop=sampling_params.get("stop", []), seed=sampling_params.get("seed"))
            (res,) = engine.generate([req])
            seen.append(res)
            return verl_api["TokenOutput"](token_ids=res.token_ids, log_probs=res.logprobs)

    task = world_tasks[TWO_CALLS]
    config = verl_config_factory(loop=LoopSettings(act=RoleSampling(max_tokens=24),
                                                   rehearse=RoleSampling(max_tokens=24)))
    outputs = run_session(config, TinyServer(), tok, rl_dataset[TWO_CALLS])
    assert len(outputs) == len(seen) >= 1
    assert outputs[0].extra_fields["role"] == "act"
    assert outputs[0].prompt_ids == act_prompt_ids(tok, [Message("system", task.messages[0].content),
                                                         Message("user", task.messages[1].content)], task.tools)
    for out, res in zip(outputs, seen):
        assert out.response_ids == res.token_ids and out.response_logprobs == pytest.approx(res.logprobs)
        assert out.reward_score is not None and out.response_mask == [1] * len(res.token_ids)
