"""Model slots (envace.engines.slots): a local dir served in-process or an OpenAI-compatible endpoint whose
API key is read from a named environment variable when the client is built and is never written down.

The endpoint cases run against the real `envace serve` app (uvicorn on 127.0.0.1) holding the tiny
model; one case uses httpx's MockTransport to see the request headers (what a hosted API would
receive), since `envace serve` itself ignores keys.
"""

from __future__ import annotations

import json

import httpx
import pytest

from envace.config import ConfigError, load_config
from envace.engines.slots import ModelSlot, SlotCache, SlotKind

SECRET = "sk-test-0123456789abcdefSECRET"
MSGS = [{"role": "user", "content": "We received 5 boxes of rice, please add them."}]


def test_a_slot_is_one_source_and_names_its_problem():
    with pytest.raises(ValueError, match="either model_dir .* or base_url"):
        ModelSlot(model_dir="m", base_url="http://h:1/v1", model="x")
    with pytest.raises(ValueError, match="needs model_dir=<local model dir> or base_url"):
        ModelSlot()
    with pytest.raises(ValueError, match="needs model=<served model name>"):
        ModelSlot(base_url="http://h:1/v1")
    with pytest.raises(ValueError, match="must start with http"):
        ModelSlot(base_url="h:1/v1", model="x")
    with pytest.raises(ValueError, match="NAME of an environment variable"):
        ModelSlot(base_url="http://h:1/v1", model="x", api_key_env=SECRET)
    assert ModelSlot(model_dir="m").kind is SlotKind.LOCAL
    assert ModelSlot.endpoint("http://h:1/v1", "x", "K").kind is SlotKind.ENDPOINT


def test_check_names_the_field_and_the_fix(tmp_path, monkeypatch):
    with pytest.raises(ConfigError) as err:
        ModelSlot(model_dir=str(tmp_path / "nope")).check("judge")
    assert err.value.field == "judge.model_dir" and "is not a directory" in str(err.value)
    assert "envace model init" in str(err.value)
    monkeypatch.delenv("ENVACE_SLOT_TEST_KEY", raising=False)
    slot = ModelSlot.endpoint("http://127.0.0.1:9/v1", "x", "ENVACE_SLOT_TEST_KEY")
    with pytest.raises(ConfigError) as err:
        slot.build_policy("user_sim")  # fails at build, before any request
    assert err.value.field == "user_sim.api_key_env"
    assert "ENVACE_SLOT_TEST_KEY" in str(err.value) and "export ENVACE_SLOT_TEST_KEY=<key>" in str(err.value)


def test_describe_records_names_never_the_key(monkeypatch):
    monkeypatch.setenv("ENVACE_SLOT_TEST_KEY", SECRET)
    slot = load_config(ModelSlot, None, ["base_url=http://judge-host:8000/v1", "model=qwen3-30b",
                                         "api_key_env=ENVACE_SLOT_TEST_KEY", "temperature=0.6"])
    d = slot.describe()
    assert d == {"kind": "endpoint", "base_url": "http://judge-host:8000/v1", "model": "qwen3-30b",
                 "api_key_env": "ENVACE_SLOT_TEST_KEY", "name": "qwen3-30b @ http://judge-host:8000/v1",
                 "temperature": 0.6, "top_p": 1.0, "max_tokens": None}
    assert SECRET not in json.dumps(slot.model_dump()) and SECRET not in json.dumps(d)


def test_the_key_is_read_when_the_client_is_built_and_sent_as_bearer(monkeypatch):
    seen: list[str | None] = []
    bodies: list[dict] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers.get("authorization"))
        bodies.append(json.loads(request.content))
        return httpx.Response(200, json={"choices": [{"message": {"role": "assistant", "content": "ok"},
                                                      "finish_reason": "stop"}]})

    slot = ModelSlot.endpoint("http://api.example/v1", "m", "ENVACE_SLOT_TEST_KEY", top_p=0.8, max_tokens=64)
    monkeypatch.setenv("ENVACE_SLOT_TEST_KEY", "first-key")
    policy = slot.build_policy("policy", transport=httpx.MockTransport(handler))
    monkeypatch.setenv("ENVACE_SLOT_TEST_KEY", "second-key")  # a new client reads the variable again
    judge = slot.build_judge("judge", transport=httpx.MockTransport(handler))
    assert policy.reply(MSGS, []).content == "ok" and judge.complete(MSGS) == "ok" and judge.chat(
        MSGS, json_schema=None, temperature=0.0) == "ok"
    assert seen == ["Bearer first-key", "Bearer second-key", "Bearer second-key"]
    # every role sends the slot's sampling limits (the judge too: a verdict is capped like a local judge's)
    assert [(b["model"], b["top_p"], b["max_tokens"]) for b in bodies] == [("m", 0.8, 64)] * 3


def test_local_slots_share_one_model_and_reply_as_the_direct_policy(tiny_dir):
    from envace.engines.chat_model import HFChatPolicy, LocalChatModel

    cache = SlotCache("cpu")
    slot = ModelSlot.local(tiny_dir, max_tokens=12)
    policy = slot.build_policy("policy", cache=cache)
    user = slot.model_copy(update={"temperature": 0.0}).build_policy("user_sim", cache=cache)
    judge = slot.build_judge("judge", cache=cache)
    assert policy.model is user.model is judge.model  # one load for three roles on one dir
    assert policy is not user and policy.name == f"{tiny_dir.name} (local)"
    direct = HFChatPolicy(LocalChatModel.from_dir(tiny_dir, device="cpu"), max_tokens=12)
    got, want = policy.reply(MSGS, [], seed=3), direct.reply(MSGS, [], seed=3)
    assert (got.content, got.tool_calls) == (want.content, want.tool_calls)  # greedy: the same tokens
    choices, _ = direct.model.generate(MSGS, temperature=0.0, max_tokens=12, parse_tools=False)
    assert judge.complete(MSGS) == choices[0].content.strip()


def test_endpoint_slot_against_envace_serve_matches_the_local_slot(tiny_dir, monkeypatch):
    from envace.engines.chat_model import LocalChatModel
    from envace.engines.server import background_server, create_app

    monkeypatch.setenv("ENVACE_SLOT_TEST_KEY", SECRET)
    chat = LocalChatModel.from_dir(tiny_dir, name="tiny", device="cpu")
    local = ModelSlot.local(tiny_dir, max_tokens=12).build_policy("policy")
    with background_server(create_app(chat=chat)) as url:
        remote = ModelSlot.endpoint(url, "tiny", "ENVACE_SLOT_TEST_KEY", max_tokens=12).build_policy("policy")
        got = remote.reply(MSGS, [], seed=1)
    want = local.reply(MSGS, [], seed=1)
    assert got.content == want.content and remote.name == f"tiny @ {url}"
