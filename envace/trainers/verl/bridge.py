"""Engines that let envace's own rollout state machine (`envace.rollout.run_rollout`) run inside a verl
agent loop, plus the endpoint adapters of the frozen simulator and the LLM judge.

`ServerBridgeEngine` is a synchronous `GenerationEngine` for a rollout running in a worker thread: each
request hops onto the agent loop's asyncio event loop, awaits verl's `server_manager.generate(...)`
(token ids in, `TokenOutput` out) and comes back as a `GenResult`. So one implementation of the episode
(prompts, parsing, limits, termination, seeds) serves both backends; only token generation differs.
Role sampling reaches the server per call: the request's temperature / top_p / max tokens / stop
strings / seed are written over verl's base sampling parameters (top_k, repetition penalty, log-probs).

`CompletionsEngine` plays the frozen simulator of the act-only baseline on an OpenAI-compatible
`/v1/completions` endpoint. The Rehearse chat is rendered with the *policy's* chat template and sent as
text, so the simulator model must share that template (e.g. a Qwen3-30B-A3B simulator for a Qwen3-8B
policy). Its token ids are re-encoded from the text and its log-probs are zeros: frozen-simulator calls
are never training rows.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from envace.chat_tokens import encode_text
from envace.engines.base import GenRequest, GenResult
from envace.trainers.verl.config import EndpointConfig


@dataclass
class GenerationStats:
    """What the bridge saw across one episode (for verl's per-sample metrics and staleness tags)."""

    calls: int = 0
    seconds: float = 0.0
    num_preempted: int = -1
    min_global_steps: int | None = None
    max_global_steps: int | None = None
    missing_logprobs: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def record(self, seconds: float, output: Any) -> None:
        with self._lock:
            self.calls += 1
            self.seconds += seconds
            if output.num_preempted is not None:
                self.num_preempted = max(self.num_preempted, 0) + int(output.num_preempted)
            extra = output.extra_fields or {}
            lo, hi = extra.get("min_global_steps"), extra.get("max_global_steps")
            if lo is not None:
                self.min_global_steps = lo if self.min_global_steps is None else min(self.min_global_steps, lo)
            if hi is not None:
                self.max_global_steps = hi if self.max_global_steps is None else max(self.max_global_steps, hi)


# per backend: the sampling-parameter names of "keep the stop string in the output" and of the per-request seed
_KEEP_STOP = {"vllm": "include_stop_str_in_output", "sglang": "no_stop_trim"}
_SEED = {"vllm": "seed", "sglang": "sampling_seed"}


class ServerBridgeEngine:
    """`GenerationEngine` over verl's async `server_manager.generate`, for a rollout in a worker thread.

    Args:
        server_manager: verl's LLM server client (anything with `async generate(request_id, *,
            prompt_ids, sampling_params) -> TokenOutput`).
        tokenizer: the policy's HF tokenizer (decodes the generated ids into the text the parsers read).
        loop: the agent loop's running event loop; `generate` must be called from another thread.
        request_id: the session's id. Calls reuse it (sticky routing keeps the session on one server, so
            its growing Act prompts hit the prefix cache) unless `unique_request_ids`: under verl's
            full_determinism the id reaches vLLM as is, and concurrent Rehearse calls need distinct ids.
        base_params: verl's per-call sampling parameters, overridden per request.
        backend: "vllm" or "sglang" (which optional fields the server accepts).
        max_tokens_cap: rollout.response_length; no call may write more.
        stats: where calls are recorded (a per-role episode's two engines share one); default a new one.
    """

    def __init__(self, server_manager: Any, tokenizer: Any, loop: asyncio.AbstractEventLoop, *, request_id: str,
                 base_params: dict[str, Any], backend: str = "vllm", max_tokens_cap: int | None = None,
                 unique_request_ids: bool = False, pass_seed: bool = True,
                 stats: GenerationStats | None = None) -> None:
        self.server_manager = server_manager
        self.tokenizer = tokenizer
        self.loop = loop
        self.request_id = request_id
        self.base_params = dict(base_params)
        if backend not in _SEED:
            raise ValueError(f"rollout backend {backend!r}: the envace bridge speaks {' / '.join(_SEED)}")
        self.backend = backend
        self.max_tokens_cap = max_tokens_cap
        self.unique_request_ids = unique_request_ids
        self.pass_seed = pass_seed
        # a per-role episode's two engines share one record
        self.stats = stats if stats is not None else GenerationStats()
        self._counter = 0
        self._counter_lock = threading.Lock()

    def sampling_params(self, req: GenRequest) -> dict[str, Any]:
        """The server-side sampling parameters of one request."""
        params = dict(self.base_params)
        params["temperature"] = float(req.temperature)
        params["top_p"] = float(req.top_p)
        cap = self.max_tokens_cap
        params["max_tokens"] = int(min(req.max_new_tokens, cap) if cap else req.max_new_tokens)
        params["logprobs"] = True  # the rows need the sampled tokens' log-probs
        if req.stop:
            params["stop"] = list(req.stop)
            # the Rehearse parser needs the closing tag in the text; both servers drop it by default
            params[_KEEP_STOP[self.backend]] = True
        if self.pass_seed and req.seed is not None:
            params[_SEED[self.backend]] = int(req.seed)
        return params

    def _next_request_id(self) -> str:
        if not self.unique_request_ids:
            return self.request_id
        with self._counter_lock:
            self._counter += 1
            return f"{self.request_id}-{self._counter}"

    async def _generate_one(self, req: GenRequest, request_id: str) -> GenResult:
        params = self.sampling_params(req)
        t0 = time.perf_counter()
        out = await self.server_manager.generate(request_id=request_id, prompt_ids=list(req.prompt_ids),
                                                 sampling_params=params)
        self.stats.record(time.perf_counter() - t0, out)
        ids = [int(t) for t in out.token_ids]
        logprobs = [float(x) for x in out.log_probs] if out.log_probs is not None else None
        if logprobs is None or len(logprobs) != len(ids):
            self.stats.missing_logprobs += 1
            logprobs = [0.0] * len(ids)
        text = self.tokenizer.decode(ids, skip_special_tokens=True)
        if out.stop_reason == "aborted":
            finish = "abort"
        elif len(ids) >= params["max_tokens"]:
            finish = "length"
        else:
            finish = "stop"
        return GenResult(token_ids=ids, logprobs=logprobs, text=text, finish_reason=finish,
                         meta={"stop_reason": out.stop_reason})

    def generate(self, requests: list[GenRequest]) -> list[GenResult]:
        """Run the requests concurrently on the event loop and wait for all (called from a worker thread)."""
        if _running_loop_is(self.loop):
            raise RuntimeError("ServerBridgeEngine.generate was called on the event loop's own thread; run the "
                               "rollout in a worker thread (loop.run_in_executor) so the loop can serve it")
        futures = [asyncio.run_coroutine_threadsafe(self._generate_one(r, self._next_request_id()), self.loop)
                   for r in requests]
        return [f.result() for f in futures]


def _running_loop_is(loop: asyncio.AbstractEventLoop) -> bool:
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:
        return False


def _api_key(endpoint: EndpointConfig) -> str | None:
    if endpoint.api_key_env is None:
        return None
    key = os.environ.get(endpoint.api_key_env)
    if not key:
        raise RuntimeError(f"environment variable {endpoint.api_key_env} (api_key_env of {endpoint.base_url}) is "
                           "empty; export the key on every Ray node, or forward it via "
                           "ray_kwargs.ray_init.runtime_env.env_vars")
    return key


class CompletionsEngine:
    """Frozen simulator on an OpenAI-compatible `/v1/completions` endpoint (a `GenerationEngine`)."""

    def __init__(self, endpoint: EndpointConfig, tokenizer: Any, transport: Any = None) -> None:
        import httpx

        key = _api_key(endpoint)
        base = endpoint.base_url.rstrip("/")
        self.url = (base if base.endswith("/v1") else base + "/v1") + "/completions"
        self.endpoint = endpoint
        self.tokenizer = tokenizer
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        self._http = httpx.Client(timeout=endpoint.timeout_s, headers=headers, transport=transport)

    def payload(self, req: GenRequest) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.endpoint.model,
            "prompt": self.tokenizer.decode(list(req.prompt_ids), skip_special_tokens=False),
            "max_tokens": req.max_new_tokens, "temperature": req.temperature, "top_p": req.top_p,
        }
        if req.stop:
            body["stop"] = list(req.stop)
            body["include_stop_str_in_output"] = True  # vLLM extension; other servers ignore it
        if req.seed is not None:
            body["seed"] = int(req.seed)
        return body

    def _complete(self, req: GenRequest) -> GenResult:
        import httpx

        last = ""
        for attempt in range(self.endpoint.max_retries + 1):
            try:
                resp = self._http.post(self.url, json=self.payload(req))
                if resp.status_code < 400:
                    choice = (resp.json().get("choices") or [{}])[0]
                    text = str(choice.get("text") or "")
                    # the endpoint's text is untrusted: a control string in it stays literal text
                    ids = encode_text(self.tokenizer, text)
                    return GenResult(token_ids=ids, logprobs=[0.0] * len(ids), text=text,
                                     finish_reason=choice.get("finish_reason") or "stop")
                last = f"HTTP {resp.status_code}: {resp.text[:300]}"
                if resp.status_code not in (408, 429, 500, 502, 503, 504):
                    break
            except httpx.TransportError as exc:
                last = f"{type(exc).__name__}: {exc}"
            if attempt < self.endpoint.max_retries:
                time.sleep(min(30.0, 0.5 * 2 ** attempt))
        raise RuntimeError(f"simulator endpoint {self.url} failed: {last}; check envace.simulator.base_url/model")

    def generate(self, requests: list[GenRequest]) -> list[GenResult]:
        return [self._complete(r) for r in requests]


class ChatJudgeBackend:
    """`envace.rewards.ChatBackend` over an OpenAI-compatible chat endpoint (the LLM judge)."""

    def __init__(self, endpoint: EndpointConfig, transport: Any = None) -> None:
        from envace.engines.openai_client import OpenAIChatClient

        self.client = OpenAIChatClient(endpoint.base_url, endpoint.model, api_key=_api_key(endpoint),
                                       timeout=endpoint.timeout_s, max_retries=endpoint.max_retries,
                                       transport=transport)

    def chat(self, messages: list[dict], *, json_schema: dict | None, temperature: float) -> str:
        return self.client.complete(messages, json_schema=json_schema, temperature=temperature)
