"""Every text-bearing part of an `envace serve` request is bounded before the chat template renders it or the
tokenizer sees it: role (one of four names), name, tool_call_id, tool calls, tools, response_format, stop and
chat_template_kwargs. A string over the field budget is a 400 naming the part, the limit and the setting;
with the budget raised, the context check counts those parts too; the rendered prompt is measured before it
is encoded. The real server (uvicorn on 127.0.0.1) serves a real tiny model; a spy around the model's own
`render` counts renders."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from envace.engines.chat_model import ContextLengthExceeded, LocalChatModel
from envace.engines.server import background_server, create_app

URL = "/v1/chat/completions"
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
BIG = "x" * 2_000_000  # under the 8 MB body limit, over the 1 MB field budget
ROOT = Path(__file__).resolve().parents[2]


def _cases(big: str) -> list[tuple[dict, str]]:
    call = {"type": "function", "function": {"name": big, "arguments": "{}"}}
    return [
        ({"messages": [{"role": big, "content": "hi"}]}, "messages[0].role"),
        ({"messages": [{"role": "user", "name": big, "content": "hi"}]}, "messages[0].name"),
        ({"messages": [*ASK, {"role": "tool", "tool_call_id": big, "content": "r"}]}, "messages[1].tool_call_id"),
        ({"messages": [*ASK, {"role": "assistant", "tool_calls": [call]}]}, "messages[1].tool_calls[0].function.name"),
        ({"messages": ASK, "tools": [{"type": "function", "function": {"name": "f", "description": big}}]},
         "tools[0].function.description"),
        ({"messages": ASK, "response_format": {"type": "json_schema", "json_schema": {
            "name": "x", "schema": {"type": "object", "description": big}}}}, "response_format.json_schema.schema"),
        ({"messages": ASK, "stop": [big]}, "stop[0]"),
        ({"messages": ASK, "chat_template_kwargs": {"note": big}}, "chat_template_kwargs.note"),
        ({"messages": [{"role": "user", "content": big}]}, "messages[0].content"),
    ]


@pytest.fixture(scope="module")
def chat(tiny_dir):
    return LocalChatModel.from_dir(tiny_dir, name="tiny", device="cpu")


@pytest.fixture
def renders(chat, monkeypatch):
    """Calls of the model's real `render` (template + tokenizer)."""
    calls: list[int] = []
    real = chat.render

    def spy(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(chat, "render", spy)
    return calls


def _post(base: str, body: dict) -> httpx.Response:
    return httpx.post(base + URL, json={"model": "tiny", "max_tokens": 1, **body}, timeout=120)


def _error(resp: httpx.Response) -> str:
    assert resp.status_code == 400, resp.text[:300]
    return resp.json()["error"]["message"]


@pytest.mark.parametrize(("body", "where"), _cases(BIG), ids=lambda v: v if isinstance(v, str) else "")
def test_an_oversized_string_in_any_part_is_a_400_before_rendering(chat, renders, body, where):
    with background_server(create_app(chat=chat)) as base:
        msg = _error(_post(base, body))
        assert where in msg and "over the limit of 1000000" in msg and "ENVACE_MAX_FIELD_BYTES" in msg, msg
        assert renders == []
        assert _post(base, {"messages": ASK}).status_code == 200 and renders == [1]  # the server still serves


NOT_IN_PROMPT = ("messages[0].role", "stop[0]", "messages[0].content")  # role: refused by name; stop: not rendered


@pytest.mark.parametrize(("body", "where"), [c for c in _cases(BIG) if c[1] not in NOT_IN_PROMPT],
                         ids=lambda v: v if isinstance(v, str) else "")
def test_with_the_field_budget_raised_the_context_check_counts_every_part(chat, renders, monkeypatch, body, where):
    monkeypatch.setenv("ENVACE_MAX_FIELD_BYTES", "10000000")
    with background_server(create_app(chat=chat)) as base:
        msg = _error(_post(base, body))
    assert f"maximum context length is {chat.max_model_len}" in msg and "at least" in msg, msg
    assert renders == []


@pytest.mark.parametrize("role", ["developer", "System", "x" * 40])
def test_a_role_outside_the_four_is_a_400_naming_them(chat, renders, role):
    with background_server(create_app(chat=chat)) as base:
        msg = _error(_post(base, {"messages": [{"role": role, "content": "hi"}]}))
    assert "messages[0].role" in msg and "system, user, assistant or tool" in msg and renders == []


def test_too_many_stop_strings_are_a_400(chat):
    with background_server(create_app(chat=chat)) as base:
        msg = _error(_post(base, {"messages": ASK, "stop": [f"s{i}" for i in range(17)]}))
    assert "stop has 17 strings" in msg and "16" in msg


def test_the_rendered_prompt_is_measured_before_it_is_tokenised(chat, monkeypatch):
    """In-process generation (no server check in front): a prompt whose rendered text cannot fit the
    context is refused before the tokenizer runs on it."""
    encodes: list[int] = []
    cls = type(chat.tokenizer)
    real = cls.__call__

    def counting(self, *args, **kwargs):
        encodes.append(1)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(cls, "__call__", counting)
    with pytest.raises(ContextLengthExceeded) as err:
        chat.generate([{"role": "user", "content": "y" * 100_000}], max_tokens=1, max_model_len=64)
    assert "maximum context length is 64 tokens" in str(err.value) and "at least" in str(err.value)
    assert encodes == []
    chat.generate(ASK, max_tokens=1)  # a prompt that fits is encoded as before
    assert encodes


SERVER_PEAK = """
import json, resource, sys
import httpx
from envace.engines.chat_model import LocalChatModel
from envace.engines.server import background_server, create_app
chat = LocalChatModel.from_dir(sys.argv[1], name="tiny", device="cpu")
with background_server(create_app(chat=chat)) as base:
    ok = httpx.post(base + "/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}],
                    "max_tokens": 1}, timeout=120).status_code
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1, "response_format": {
            "type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object",
            "properties": {f"p{i}": {"type": "string", "description": "d" * 900} for i in range(6000)}}}}}
    status = httpx.post(base + "/v1/chat/completions", json=body, timeout=300).status_code
    grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
print(json.dumps({"ok": ok, "status": status, "grown_mb": grown}))
"""


def test_a_large_response_format_leaves_the_server_peak_bounded(tiny_dir):
    """A ~5.5 MB response_format schema made of many small strings (each under the field budget): refused by
    the context check before rendering; the server process's peak grows by far less than rendering and
    tokenising it needs (loose bound, measured in a fresh process)."""
    out = subprocess.run([sys.executable, "-c", SERVER_PEAK, str(tiny_dir)], cwd=ROOT, capture_output=True,
                         text=True, timeout=600, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr[-2000:]
    res = json.loads(out.stdout.strip().splitlines()[-1])
    assert res["ok"] == 200 and res["status"] == 400, res
    assert res["grown_mb"] < 250, res
