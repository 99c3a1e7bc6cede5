"""An endpoint's API key comes from the environment variable the config names, never from the config itself,
and a credential in the endpoint URL is never printed in errors. Against a small real
FastAPI app on 127.0.0.1 that checks the Authorization header."""

from __future__ import annotations

import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from envace.config import ConfigError
from envace.engines.openai_client import ChatClientError, OpenAIChatClient
from envace.engines.server import background_server

KEY = "sk-envace-test-4711"


def keyed_app() -> tuple[FastAPI, list[str | None]]:
    app, seen = FastAPI(), []

    @app.post("/v1/chat/completions")
    async def chat(request: Request):
        auth = request.headers.get("authorization")
        seen.append(auth)
        if auth != f"Bearer {KEY}":
            return JSONResponse(status_code=401, content={"error": {"message": "bad key"}})
        return JSONResponse({"id": "x", "object": "chat.completion", "created": 0, "model": "m",
                             "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"},
                                          "finish_reason": "stop"}], "usage": {}})

    return app, seen


def test_key_is_read_from_the_named_environment_variable(monkeypatch):
    monkeypatch.setenv("ENVACE_TEST_API_KEY", KEY)
    app, seen = keyed_app()
    with background_server(app) as url:
        client = OpenAIChatClient(url, "m", api_key_env="ENVACE_TEST_API_KEY", max_retries=0)
        assert client.chat([{"role": "user", "content": "hi"}]).text == "ok"
        with pytest.raises(ChatClientError, match="401"):  # without the variable's key the server refuses
            OpenAIChatClient(url, "m", max_retries=0).chat([{"role": "user", "content": "hi"}])
    assert seen == [f"Bearer {KEY}", None]


def test_an_unset_variable_is_an_error_naming_it(monkeypatch):
    monkeypatch.delenv("ENVACE_TEST_API_KEY", raising=False)
    with pytest.raises(RuntimeError, match="ENVACE_TEST_API_KEY"):
        OpenAIChatClient("http://127.0.0.1:9/v1", "m", api_key_env="ENVACE_TEST_API_KEY")


def test_endpoint_config_names_the_variable_and_has_no_field_for_the_key():
    from envace.trainers.verl.config import EndpointConfig

    ep = EndpointConfig(base_url="http://judge:8000/v1", model="j", api_key_env="JUDGE_KEY")
    assert ep.model_dump()["api_key_env"] == "JUDGE_KEY"
    with pytest.raises((ConfigError, ValueError), match="api_key"):
        EndpointConfig.model_validate({"base_url": "http://judge:8000/v1", "model": "j", "api_key": KEY})


def test_a_password_in_the_endpoint_url_is_masked_in_errors():
    app, _seen = keyed_app()
    with background_server(app) as url:
        secret_url = url.replace("http://", "http://user:PASSWORD@")
        with pytest.raises(ChatClientError) as err:
            OpenAIChatClient(secret_url, "m", max_retries=0).chat([{"role": "user", "content": "hi"}])
    assert "401" in str(err.value) and "PASSWORD" not in str(err.value) and "PASSWORD" not in err.value.url
    assert "user:***@" in str(err.value)
