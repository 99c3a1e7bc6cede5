"""OpenAIChatClient against small real FastAPI apps served by uvicorn on 127.0.0.1: retries with backoff on
503 / 429 / connection errors, no retry on 4xx, timeouts, error messages naming the URL, tool-call parsing
from the `tool_calls` field and from Hermes text."""

from __future__ import annotations

import asyncio
import json
import socket

import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from envace.engines.openai_client import ChatClientError, OpenAIChatClient, OpenAIPolicy, parse_choice
from envace.engines.reply import AssistantReply, BenchPolicy
from envace.engines.server import background_server
from envace.types import ErrorCode, ToolCall


def completion(message: dict, finish: str = "stop") -> dict:
    return {"id": "x", "object": "chat.completion", "created": 0, "model": "m",
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}}


def scripted_app(responses: list) -> tuple[FastAPI, list[dict]]:
    """An endpoint answering the i-th request with responses[i]: (status, body) or ("sleep", seconds)."""
    app, seen = FastAPI(), []

    @app.post("/v1/chat/completions")
    async def chat(request: Request):
        seen.append(await request.json())
        status, body = responses[min(len(seen), len(responses)) - 1]
        if status == "sleep":
            await asyncio.sleep(body)
            return JSONResponse(completion({"role": "assistant", "content": "late"}))
        headers = {"Retry-After": "0"} if status == 429 else None
        return JSONResponse(status_code=status, content=body, headers=headers)

    return app, seen


OK = (200, completion({"role": "assistant", "content": "hello"}))
UNAVAILABLE = (503, {"error": {"message": "overloaded", "type": "server_error"}})


def test_retries_503_twice_then_answers():
    app, seen = scripted_app([UNAVAILABLE, UNAVAILABLE, OK])
    with background_server(app) as url:
        client = OpenAIChatClient(url, "m", max_retries=4, backoff=0.01)
        result = client.chat([{"role": "user", "content": "hi"}])
    assert result.text == "hello" and result.usage["total_tokens"] == 5
    assert len(seen) == 3  # two refusals, then the answer


def test_retries_429_with_retry_after():
    app, seen = scripted_app([(429, {"error": {"message": "slow down"}}), OK])
    with background_server(app) as url:
        assert OpenAIChatClient(url, "m", backoff=0.01).chat([{"role": "user", "content": "hi"}]).text == "hello"
    assert len(seen) == 2


def test_gives_up_after_last_retry_naming_url_and_status():
    app, seen = scripted_app([UNAVAILABLE])
    with background_server(app) as url:
        client = OpenAIChatClient(url, "m", max_retries=2, backoff=0.01)
        with pytest.raises(ChatClientError) as info:
            client.chat([{"role": "user", "content": "hi"}])
    assert len(seen) == 3
    msg = str(info.value)
    assert f"{url}/v1/chat/completions" in msg and "503" in msg and "overloaded" in msg and "3 attempts" in msg
    assert info.value.status == 503


def test_no_retry_on_4xx():
    app, seen = scripted_app([(400, {"error": {"message": "messages[0] has no role"}})])
    with background_server(app) as url:
        with pytest.raises(ChatClientError) as info:
            OpenAIChatClient(url, "m", max_retries=4, backoff=0.01).chat([{"role": "user", "content": "x"}])
    assert len(seen) == 1
    assert info.value.status == 400 and "messages[0] has no role" in str(info.value) and url in str(info.value)


def test_timeout_is_retried_then_reported():
    app, seen = scripted_app([("sleep", 1.5)])
    with background_server(app) as url:
        client = OpenAIChatClient(url, "m", timeout=0.2, max_retries=1, backoff=0.01)
        with pytest.raises(ChatClientError) as info:
            client.chat([{"role": "user", "content": "hi"}])
    assert len(seen) == 2
    assert "timed out" in str(info.value) and url in str(info.value) and info.value.status is None


def test_connection_refused_is_reported():
    with socket.socket() as s:  # a port that nothing listens on once closed
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    client = OpenAIChatClient(f"http://127.0.0.1:{port}", "m", max_retries=1, backoff=0.01)
    with pytest.raises(ChatClientError) as info:
        client.chat([{"role": "user", "content": "hi"}])
    assert "connection failed" in str(info.value) and f"127.0.0.1:{port}" in str(info.value)


def test_payload_tools_schema_and_complete_strips_reasoning():
    body = completion({"role": "assistant", "content": "<think>check fields</think>\n{\"ok\": true}"})
    app, seen = scripted_app([(200, body)])
    schema = {"title": "verdict", "type": "object", "properties": {"ok": {"type": "boolean"}}}
    with background_server(app) as url:
        client = OpenAIChatClient(url + "/v1/", "judge-model", api_key="k")
        text = client.complete([{"role": "user", "content": "judge"}], json_schema=schema, temperature=0.0)
    assert json.loads(text) == {"ok": True}
    sent = seen[0]
    assert sent["model"] == "judge-model" and sent["temperature"] == 0.0
    assert sent["response_format"] == {"type": "json_schema",
                                       "json_schema": {"name": "verdict", "schema": schema, "strict": True}}
    assert "tools" not in sent


def test_policy_reply_from_tool_calls_field():
    msg = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_a", "type": "function", "function": {"name": "cd", "arguments": "{\"folder\": \"docs\"}"}},
        {"id": "call_b", "type": "function", "function": {"name": "ls", "arguments": "{}"}}]}
    app, seen = scripted_app([(200, completion(msg, "tool_calls"))])
    tools = [{"type": "function", "function": {"name": "cd", "parameters": {"type": "object", "properties": {}}}}]
    with background_server(app) as url:
        policy = OpenAIPolicy(OpenAIChatClient(url, "m"), temperature=0.7, max_tokens=32)
        assert isinstance(policy, BenchPolicy)
        reply = policy.reply([{"role": "user", "content": "go"}], tools, seed=11)
    assert seen[0]["tools"] == tools and seen[0]["seed"] == 11 and seen[0]["max_tokens"] == 32
    assert reply.tool_calls == [ToolCall("cd", {"folder": "docs"}, "call_a"), ToolCall("ls", {}, "call_b")]
    assert reply.finish_reason == "tool_calls" and reply.parse_error is None
    history = reply.to_message()
    assert history["tool_calls"][0] == {"id": "call_a", "type": "function",
                                        "function": {"name": "cd", "arguments": "{\"folder\": \"docs\"}"}}


# ----- parse_choice: what the server sent -> ChatChoice ------------------------------------------------

def _choice(content, tool_calls=None, finish="stop"):
    msg = {"role": "assistant", "content": content}
    if tool_calls is not None:
        msg["tool_calls"] = tool_calls
    return {"index": 0, "message": msg, "finish_reason": finish}


def test_parse_hermes_text_when_server_did_not():
    text = ('Let me look.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
            '<tool_call>\n{"name": "get_time", "arguments": {"tz": "CET"}}\n</tool_call>')
    c = parse_choice(_choice(text))
    assert [(t.name, t.arguments) for t in c.tool_calls] == [("get_weather", {"city": "Paris"}),
                                                              ("get_time", {"tz": "CET"})]
    assert c.text == "Let me look." and c.finish_reason == "tool_calls" and c.parse_error is None
    assert all(t.id and t.id.startswith("call_") for t in c.tool_calls)
    assert c.tool_calls[0].id != c.tool_calls[1].id


def test_malformed_output_is_classified_not_raised():
    bad_text = parse_choice(_choice('<tool_call>\n{"name": "f", "arguments": {"x": 1}\n</tool_call>'))
    assert bad_text.parse_error is ErrorCode.JSON_DECODE and bad_text.tool_calls == []
    unbalanced = parse_choice(_choice("<tool_call>\n{\"name\": \"f\""))
    assert unbalanced.parse_error is ErrorCode.INVALID_TOOL_CALL_FORMAT
    bad_args = parse_choice(_choice(None, [{"id": "1", "function": {"name": "f", "arguments": "{x: 1"}}]))
    assert bad_args.parse_error is ErrorCode.JSON_DECODE and bad_args.tool_calls == []
    no_name = parse_choice(_choice(None, [{"id": "1", "function": {"arguments": "{}"}}]))
    assert no_name.parse_error is ErrorCode.MISSING_NAME


def test_plain_reply_has_no_calls_and_keeps_reasoning():
    c = parse_choice({"message": {"role": "assistant", "content": "Paris is sunny.",
                                  "reasoning_content": "weather known"}, "finish_reason": "length"})
    assert (c.text, c.tool_calls, c.parse_error, c.finish_reason, c.reasoning) == (
        "Paris is sunny.", [], None, "length", "weather known")


def test_assistant_reply_to_message_assigns_ids():
    reply = AssistantReply(content="", tool_calls=[ToolCall("a", {"k": [1, 2]}), ToolCall("b", {})])
    msg = reply.to_message()
    assert [c["id"] for c in msg["tool_calls"]] == ["call_0", "call_1"]
    assert json.loads(msg["tool_calls"][0]["function"]["arguments"]) == {"k": [1, 2]}
    assert AssistantReply(content="done").to_message() == {"role": "assistant", "content": "done"}


def test_bad_constructor_arguments():
    with pytest.raises(ValueError, match="max_retries"):
        OpenAIChatClient("http://127.0.0.1:1", "m", max_retries=-1)
    with pytest.raises(ValueError, match="timeout"):
        OpenAIChatClient("http://127.0.0.1:1", "m", timeout=0)
