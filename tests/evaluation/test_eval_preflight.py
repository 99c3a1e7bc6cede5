"""Before and around the tasks of an evaluation: endpoint probes (a real `envace serve` of the random tiny
model, and a port nobody listens on), the context guard of in-process slots (the tiny model declares
1024 positions), slot defaults, and the help text."""

from __future__ import annotations

import socket

import pytest
import torch

from envace.engines.chat_model import ContextLengthExceeded
from envace.engines.slots import ModelSlot, SlotCache
from envace.evaluation.config import BenchmarkOptions, BenchmarkPaths, EvalConfig
from envace.evaluation.probe import EndpointProbeFailed, probe_endpoints

LONG = "list the files in every folder " * 400  # well over 1024 tokens for the tiny tokenizer


def _dead_url() -> str:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    return f"http://127.0.0.1:{port}/v1"


@pytest.fixture(scope="module")
def served(tiny_dir):
    from envace.engines.server import background_server, create_app

    torch.set_num_threads(1)
    with background_server(create_app(tiny_dir)) as url:
        yield url


def test_a_live_endpoint_passes_the_probe_and_a_dead_or_wrong_one_stops_the_run(served, tiny_dir):
    live = ModelSlot.endpoint(served, tiny_dir.name, max_tokens=4)
    assert probe_endpoints({"policy": live, "user_sim": live, "judge": None}) == ["policy"]  # one probe per server
    dead = ModelSlot.endpoint(_dead_url(), "judge-model")
    with pytest.raises(EndpointProbeFailed) as exc:
        probe_endpoints({"policy": live, "judge": dead})
    assert exc.value.field == "judge.base_url"
    assert exc.value.what.startswith(f"judge endpoint {dead.base_url} (model judge-model) failed a probe chat "
                                     "completion: POST ") and "connection failed" in exc.value.what
    wrong = ModelSlot.endpoint(served, "no-such-model")
    with pytest.raises(EndpointProbeFailed, match="HTTP 404: The model `no-such-model` does not exist"):
        probe_endpoints({"user_sim": wrong})


def test_a_local_slot_refuses_a_prompt_over_the_models_own_context(tiny_dir):
    cache = SlotCache("cpu")
    policy = ModelSlot.local(tiny_dir, max_tokens=2).build_policy("policy", cache=cache)
    with pytest.raises(ContextLengthExceeded) as exc:
        policy.reply([{"role": "user", "content": LONG}], [])
    assert exc.value.limit == 1024 and exc.value.prompt_tokens > 1024
    assert policy.reply([{"role": "user", "content": "hi"}], []).usage["completion_tokens"] <= 2  # short ones run
    # the slot's own limit overrides the model's (here: lower), on the same loaded model
    judge = ModelSlot.local(tiny_dir, max_tokens=2, max_model_len=16).build_judge("judge", cache=cache)
    with pytest.raises(ContextLengthExceeded, match="maximum context length is 16 tokens"):
        judge.complete([{"role": "user", "content": "list the files in every folder " * 5}])


def test_an_over_long_prompt_is_that_tasks_classified_error(tiny_dir, tmp_path):
    import json

    from envace.benchmarks.finmcp.benchmark import FinMCPBenchmark
    from envace.evaluation.verdict import benchmark_failure

    call = {"id": "a", "type": "function", "function": {"name": "Search", "arguments": "{}"}}
    records = [{"id": "long", "scenery": "Fund-x-y", "diff_level": {"level": "easy"}, "messages": [
                   {"role": "user", "content": LONG}, {"role": "assistant", "content": "", "tool_calls": [call]},
                   {"role": "tool", "tool_call_id": "a", "content": "{}"}, {"role": "assistant", "content": "ok"}]},
               {"id": "short", "scenery": "Fund-x-y", "diff_level": {"level": "easy"}, "messages": [
                   {"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}]
    data = tmp_path / "fin.json"
    data.write_text(json.dumps(records))
    policy = ModelSlot.local(tiny_dir, max_tokens=2).build_policy("policy", cache=SlotCache("cpu"))
    result = FinMCPBenchmark(data).run(policy, k=1)
    by = {r["id"]: r for r in result.records}
    assert by["long"]["task_error"]["type"] == "ContextLengthExceeded" and by["short"]["task_error"] is None
    assert result.meta["task_errors"]["terminations"] == {"context": 1}
    assert result.error_summary().startswith("finmcp: 1 of 2 task runs errored and score 0: policy: "
                                             "ContextLengthExceeded x1 (e.g. long: this model's maximum context "
                                             "length is 1024 tokens")
    assert result.error_summary().endswith("; ended context x1")
    assert benchmark_failure(result, 0.1) is None  # one task ran: a (low) measured score, not a failed run


def test_user_sim_settings_alone_apply_to_the_policy_model(tiny_dir):
    cfg = EvalConfig.model_validate({"model": str(tiny_dir), "user_sim": {"max_tokens": 32}})
    assert cfg.user_sim.model_dir == str(tiny_dir) and cfg.user_sim.max_tokens == 32
    assert cfg.user_sim.temperature == 0.0  # the user simulator's own default, not the policy's 0.6
    ep = EvalConfig.model_validate({"policy": {"base_url": "http://h:1/v1", "model": "m", "api_key_env": "K"},
                                    "user_sim": {"max_tokens": 32}, "benchmarks": ["tau2"]})
    assert (ep.user_sim.base_url, ep.user_sim.model, ep.user_sim.api_key_env) == ("http://h:1/v1", "m", "K")


def test_help_lists_every_field():
    from envace.evaluation.terminal import EVAL_EPILOG

    fields = [f for f in EvalConfig.model_fields if f not in ("user_sim_model", "policy", "user_sim", "judge",
                                                              "paths", "bench")]
    fields += [f"paths.{f}" for f in BenchmarkPaths.model_fields]
    fields += [f"bench.{f}" for f in BenchmarkOptions.model_fields]
    fields += [f"<slot>.{f}" for f in ModelSlot.model_fields]
    missing = [f for f in fields if f not in EVAL_EPILOG]
    assert not missing, f"envace eval --help does not list {missing}"
