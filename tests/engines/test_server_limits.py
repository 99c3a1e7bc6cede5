"""`envace serve` limits: context length (default: the model's own
max_position_embeddings), a max_tokens ceiling, a request-size limit, 64-bit seeds, cancellation when the
client disconnects and prompt shutdown with a generation in flight. The real server (uvicorn on
127.0.0.1) serves a real tiny model; a forward pre-hook counts the model's forward passes (one per
generated token), so "the generation stopped early" is a count, not a time."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import httpx
import pytest

from envace.engines.chat_model import LocalChatModel
from envace.engines.server import MAX_SEED, background_server, create_app, longest_token_chars

ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
URL = "/v1/chat/completions"


@pytest.fixture(scope="module")
def chat(tiny_dir):
    return LocalChatModel.from_dir(tiny_dir, name="tiny", device="cpu")


@pytest.fixture(scope="module")
def url(chat):
    with background_server(create_app(chat=chat, max_request_bytes=200_000)) as base:
        yield base


def post(base: str, body: dict, **kw) -> httpx.Response:
    return httpx.post(base + URL, json={"model": "tiny", **body}, timeout=120, **kw)


def error_of(resp: httpx.Response, status: int) -> str:
    assert resp.status_code == status, resp.text
    err = resp.json()["error"]
    assert err["code"] == status and isinstance(err["type"], str)
    return err["message"]


def test_default_context_is_the_models_own(chat, tiny_dir, url):
    own = json.loads((tiny_dir / "config.json").read_text())["max_position_embeddings"]
    assert chat.max_model_len == own
    # prompt + max_tokens beyond the context: 400 naming the limit
    msg = error_of(post(url, {"messages": ASK, "max_tokens": own}), 400)
    assert f"maximum context length is {own}" in msg
    # a prompt that tokenises past the context (checked after tokenising)
    words = " ".join(f"w{i}" for i in range(own))
    tokens = len(chat.tokenizer.encode(words, add_special_tokens=False))
    assert tokens > own and len(words) // longest_token_chars(chat.tokenizer) < own  # passes the cheap check
    msg = error_of(post(url, {"messages": [{"role": "user", "content": words}], "max_tokens": 1}), 400)
    assert f"maximum context length is {own}" in msg and "the prompt has" in msg


def test_a_million_characters_are_refused_before_tokenising(url, chat):
    big = "x" * 1_000_000  # under the byte limit of this app? no: 1 MB > 200 kB -> 413 first
    assert "larger than this server's limit of 200000 bytes" in error_of(
        post(url, {"messages": [{"role": "user", "content": big}]}), 413)
    with background_server(create_app(chat=chat)) as base:  # default byte limit (8 MB)
        msg = error_of(post(base, {"messages": [{"role": "user", "content": big}], "max_tokens": 1}), 400)
    assert f"maximum context length is {chat.max_model_len}" in msg and "at least" in msg


def test_max_tokens_ceiling(url, chat):
    for asked in (1e18, 10**18, chat.max_model_len + 1):
        msg = error_of(post(url, {"messages": ASK, "max_tokens": asked}), 400)
        assert f"more than this server allows ({chat.max_model_len})" in msg
    for asked in (1e30, 10**30):  # past int64: refused by the request schema
        assert "max_tokens" in error_of(post(url, {"messages": ASK, "max_tokens": asked}), 400)
    assert "more than" in error_of(post(url, {"messages": ASK, "max_completion_tokens": 10**9}), 400)
    with background_server(create_app(chat=chat, max_tokens_limit=3)) as base:
        assert "allows (3)" in error_of(post(base, {"messages": ASK, "max_tokens": 4}), 400)
        ok = post(base, {"messages": ASK, "max_tokens": 3, "temperature": 0})
        assert ok.status_code == 200 and ok.json()["usage"]["completion_tokens"] <= 3


def test_request_size_limit_with_and_without_content_length(url):
    body = json.dumps({"model": "tiny", "messages": [{"role": "user", "content": "y" * 300_000}]}).encode()
    assert "200000 bytes" in error_of(httpx.post(url + URL, content=body, timeout=60), 413)

    def chunks():  # no Content-Length: the server must count what it reads
        for i in range(0, len(body), 16_384):
            yield body[i:i + 16_384]

    assert "200000 bytes" in error_of(httpx.post(url + URL, content=chunks(), timeout=60), 413)
    assert "not JSON" in error_of(httpx.post(url + URL, content=b"[" * 100_000, timeout=60), 400)


def test_huge_seed_is_a_400(url):
    msg = error_of(post(url, {"messages": ASK, "seed": 2**70, "max_tokens": 2}), 400)
    assert "seed" in msg
    assert "seed" in error_of(post(url, {"messages": ASK, "seed": MAX_SEED, "n": 2, "max_tokens": 2}), 400)
    assert "seed" in error_of(post(url, {"messages": ASK, "seed": -1, "max_tokens": 2}), 400)
    ok = post(url, {"messages": ASK, "seed": MAX_SEED, "max_tokens": 2})
    assert ok.status_code == 200, ok.text


class Counter:
    """Counts forward passes; sleeps a little in each so a generation spans the client's timeout."""

    def __init__(self, delay: float) -> None:
        self.calls, self.delay = 0, delay

    def __call__(self, _module, _args) -> None:
        self.calls += 1
        time.sleep(self.delay)


@pytest.fixture
def slow_chat(tiny_dir):
    """A separate model instance (the hook must not slow the other tests) that greedy-decodes to length."""
    chat = LocalChatModel.from_dir(tiny_dir, name="tiny", device="cpu")
    choices, _ = chat.generate(ASK, temperature=0.0, max_tokens=40)
    assert choices[0].finish_reason == "length"  # precondition: greedy never stops early on this model
    counter = Counter(0.01)
    chat.engine.model.register_forward_pre_hook(counter)
    return chat, counter


LONG = {"messages": ASK, "temperature": 0, "max_tokens": 900}


def test_client_disconnect_cancels_the_generation(slow_chat):
    chat, counter = slow_chat
    with background_server(create_app(chat=chat)) as base:
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(base + URL, json={"model": "tiny", **LONG}, timeout=1.0)  # the client gives up
        # the next request waits for the model's lock, so the first generation has ended when it returns
        after = post(base, {"messages": ASK, "temperature": 0, "max_tokens": 1})
        assert after.status_code == 200
    assert 0 < counter.calls < LONG["max_tokens"]  # 900 forward passes without cancellation


def test_shutdown_does_not_wait_for_a_generation_in_flight(slow_chat):
    chat, counter = slow_chat
    answers: list[httpx.Response | Exception] = []
    with background_server(create_app(chat=chat)) as base:
        def call() -> None:
            try:
                answers.append(post(base, LONG))
            except httpx.HTTPError as exc:
                answers.append(exc)

        client = threading.Thread(target=call)
        client.start()
        while counter.calls < 5:  # generating now
            time.sleep(0.01)
        # leaving the block is the server's SIGTERM path (handle_exit) and joins the server thread
    client.join(timeout=120)
    assert counter.calls < LONG["max_tokens"]
    (answer,) = answers
    assert isinstance(answer, httpx.Response) and answer.status_code == 503, answer
    assert "shutting down" in answer.json()["error"]["message"]


def test_sigterm_stops_envace_serve(tiny_dir, tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "envace.cli", "serve", str(tiny_dir), "--port", str(port),
                             "--max-tokens-limit", "64"], env=env, cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        base = f"http://127.0.0.1:{port}"
        for _ in range(600):
            try:
                if httpx.get(base + "/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.2)
        else:
            pytest.fail("envace serve did not start")
        over = httpx.post(base + URL, json={"messages": ASK, "max_tokens": 65}, timeout=120)
        assert "allows (64)" in error_of(over, 400)  # the CLI option reached the server
        proc.send_signal(signal.SIGTERM)
        # one signal is enough; uvicorn re-raises the signal after a clean shutdown, hence -SIGTERM
        assert proc.wait(timeout=120) in (0, -signal.SIGTERM)
        assert "Shutting down" in proc.stdout.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
