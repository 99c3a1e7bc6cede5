"""Serve a merged checkpoint on an OpenAI-compatible endpoint for the length of one evaluation.

`served_endpoint(model_dir, ServeConfig(...))` starts `envace serve DIR` (CPU or GPU, one request at a
time) or `vllm serve DIR --enable-auto-tool-choice --tool-call-parser hermes` (GPU) as a child process in
its own session on a free port, waits until `GET /v1/models` answers, yields the base URL (`.../v1`) and
the served model name read back from that answer, and stops the server's process group on exit --
also when the evaluation failed. The evaluation then talks to it through its policy endpoint slot, the
same client path as any remote model.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from enum import Enum
from pathlib import Path

import httpx
from pydantic import Field

from envace.cluster.ray_head import free_port
from envace.config import BaseConfig


class ServerKind(str, Enum):
    ENVACE = "envace"  # envace serve: any HF dir, CPU or one GPU, one request at a time
    VLLM = "vllm"  # vllm serve: GPU, batched; needs the gpu extra


class ServeConfig(BaseConfig):
    """How a merged checkpoint is served for its evaluation."""

    kind: ServerKind = Field(ServerKind.ENVACE, description="envace (any machine) or vllm (GPU).")
    host: str = Field("127.0.0.1", description="Interface the server binds (the evaluation runs beside it).")
    port: int | None = Field(None, ge=1, le=65535, description="Port (None: a free one).")
    startup_timeout_s: float = Field(600.0, gt=0, description="How long to wait for GET /v1/models to answer.")
    extra_args: list[str] = Field(default_factory=list, description="Extra command-line arguments of the server "
                                                                    "(e.g. --tensor-parallel-size 2 for vllm).")


class ServedEndpoint(BaseConfig):
    base_url: str = Field(..., description="OpenAI-compatible base URL, ending in /v1.")
    model: str = Field(..., description="The served model name (from GET /v1/models).")


def server_command(model_dir: str | Path, cfg: ServeConfig, port: int) -> list[str]:
    if cfg.kind is ServerKind.VLLM:
        return ["vllm", "serve", str(model_dir), "--host", cfg.host, "--port", str(port),
                "--enable-auto-tool-choice", "--tool-call-parser", "hermes", *cfg.extra_args]
    return [sys.executable, "-m", "envace.cli", "serve", str(model_dir), "--host", cfg.host, "--port", str(port),
            *cfg.extra_args]


@contextmanager
def served_endpoint(model_dir: str | Path, cfg: ServeConfig,
                    log_path: str | Path | None = None) -> Iterator[ServedEndpoint]:
    """Run the server for `model_dir` while the block runs; yields its endpoint."""
    port = cfg.port or free_port(cfg.host)
    log = open(log_path, "w") if log_path else subprocess.DEVNULL  # noqa: SIM115 - closed below
    proc = subprocess.Popen(server_command(model_dir, cfg, port), stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True, env={**os.environ})
    base = f"http://{cfg.host}:{port}/v1"
    try:
        model = _wait_ready(proc, base, cfg.startup_timeout_s, log_path)
        yield ServedEndpoint(base_url=base, model=model)
    finally:
        _stop(proc)
        if log_path:
            log.close()


def _wait_ready(proc: subprocess.Popen, base: str, timeout_s: float, log_path: str | Path | None) -> str:
    deadline = time.monotonic() + timeout_s
    while True:
        if proc.poll() is not None:
            tail = Path(log_path).read_text()[-3000:] if log_path else "(no log)"
            raise RuntimeError(f"the model server exited with code {proc.returncode} before answering {base}; "
                               f"its log ends with:\n{tail}")
        try:
            r = httpx.get(f"{base}/models", timeout=5.0)
            if r.status_code == 200:
                return r.json()["data"][0]["id"]
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"the model server at {base} did not answer within {timeout_s:.0f} s; raise "
                               f"serve.startup_timeout_s or read its log {log_path}")
        time.sleep(1.0)


def _stop(proc: subprocess.Popen, grace_s: float = 30.0) -> None:
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    except ProcessLookupError:
        pass
