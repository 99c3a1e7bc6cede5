"""A stand-in prompted-simulator endpoint for the rollout and TTS tests: a real HTTP server on 127.0.0.1 (an
OpenAI-compatible `/v1/chat/completions`) that reads the call from the prompted simulator's user message
("Call to answer:" section, envace.roles.prompted_simulator) and answers with `answer(name, arguments)`, the
reply text a test chose (prose around JSON, fences, errors), so every observation can be checked by hand. A
general chat model playing the tool cannot run offline; every request body is kept for counting.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from envace.engines.server import background_server

CALL_HEAD = "Call to answer:\n"


def call_in(user: str) -> tuple[str, dict[str, Any]]:
    """(name, arguments) of the call a prompted-simulator user message asks to answer."""
    call = json.loads(user.split(CALL_HEAD, 1)[1].split("\n\n", 1)[0])
    return call["name"], call["arguments"]


@contextmanager
def prompted_endpoint(answer: Callable[[str, dict[str, Any]], str]) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """(base url with /v1, the request bodies received so far)."""
    app, requests = FastAPI(), []

    @app.post("/v1/chat/completions")
    async def completions(request: Request) -> JSONResponse:
        body = await request.json()
        requests.append(body)
        text = answer(*call_in(body["messages"][-1]["content"]))
        return JSONResponse({"choices": [{"message": {"role": "assistant", "content": text},
                                          "finish_reason": "stop"}], "usage": {}})

    with background_server(app) as url:
        yield f"{url}/v1", requests
