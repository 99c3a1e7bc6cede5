"""Hostile inputs against the input budget (envace.input_budget): how fast each is refused and what it costs.

1. `envace serve` (a real server process on 127.0.0.1 serving a tiny model, or --model DIR): for every
   text-bearing part of a request (content, role, name, tool_call_id, a tool call's name and arguments, a
   tool schema, response_format, a stop string, chat_template_kwargs), `--concurrent` requests at once, each
   carrying one `--mb` MB string in that part: the status codes, the slowest time to the answer, and the
   server's peak RSS (VmHWM, which only grows: the table shows it after each part).
2. Configs: the alias bomb as a `key=value` override (~350 characters, over 10^6 values) and a 1 MB string
   reached through 100 aliases (a file and an override): time to the one-line ConfigError and the growth
   of this process's peak RSS.
3. Sweeps: a 100 x 100 x 100 grid (10^6 cells) checked by the preflight and by `envace sweep run --dry-run`
   (a subprocess): time to the refusal; no cell runs.

    .venv/bin/python bench/hostile_inputs.py                 # full: 6 x 7 MB per request part
    .venv/bin/python bench/hostile_inputs.py --light         # 2 x 1.5 MB, for a quick check
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]


def request_parts(big: str) -> dict[str, dict]:
    call = {"type": "function", "function": {"name": "f", "arguments": json.dumps({"x": big})}}
    return {
        "content": {"messages": [{"role": "user", "content": big}]},
        "role": {"messages": [{"role": big, "content": "hi"}]},
        "name": {"messages": [{"role": "user", "name": big, "content": "hi"}]},
        "tool_call_id": {"messages": [*ASK, {"role": "tool", "tool_call_id": big, "content": "r"}]},
        "tool_call.name": {"messages": [*ASK, {"role": "assistant", "tool_calls": [
            {"type": "function", "function": {"name": big, "arguments": "{}"}}]}]},
        "tool_call.arguments": {"messages": [*ASK, {"role": "assistant", "tool_calls": [call]}]},
        "tools": {"messages": ASK, "tools": [{"type": "function", "function": {"name": "f", "description": big}}]},
        "response_format": {"messages": ASK, "response_format": {"type": "json_schema", "json_schema": {
            "name": "x", "schema": {"type": "object", "description": big}}}},
        "stop": {"messages": ASK, "stop": [big]},
        "chat_template_kwargs": {"messages": ASK, "chat_template_kwargs": {"note": big}},
    }


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _vm_hwm_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _tiny_model(tmp: Path) -> Path:
    from envace.models.corpus import world_corpus
    from envace.models.tiny import TinyModelConfig, init_tiny_model

    return init_tiny_model(world_corpus(50), tmp / "tiny", TinyModelConfig(
        hidden_size=32, num_layers=1, num_heads=2, num_kv_heads=1, head_dim=16, intermediate_size=64,
        vocab_size=400))


def bench_serve(model: Path, mb: float, concurrent: int) -> list[dict]:
    import httpx

    port = _free_port()
    server = subprocess.Popen([sys.executable, "-m", "envace.cli", "serve", str(model), "--port", str(port)],
                              cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(600):
            try:
                if httpx.get(base + "/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.2)
        rows = [{"part": "(started)", "server_peak_mb": round(_vm_hwm_mb(server.pid), 1)}]
        big = "x" * int(mb * 1_000_000)
        for part, body in request_parts(big).items():
            payload = json.dumps({"model": Path(model).name, "max_tokens": 1, **body}).encode()
            results: list[tuple[int, float]] = []

            def send(payload: bytes = payload, results: list = results) -> None:
                t0 = time.perf_counter()
                r = httpx.post(base + "/v1/chat/completions", content=payload, timeout=600,
                               headers={"content-type": "application/json"})
                results.append((r.status_code, time.perf_counter() - t0))

            threads = [threading.Thread(target=send) for _ in range(concurrent)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            rows.append({"part": part, "statuses": sorted({s for s, _ in results}),
                         "slowest_s": round(max(t for _, t in results), 3),
                         "server_peak_mb": round(_vm_hwm_mb(server.pid), 1)})
        return rows
    finally:
        server.terminate()
        server.wait(timeout=60)


def _timed_config_error(fn) -> dict:
    from envace.config import ConfigError

    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.perf_counter()
    try:
        fn()
        message = "(accepted)"
    except ConfigError as exc:
        message = str(exc)
    return {"seconds": round(time.perf_counter() - t0, 3), "one_line": "\n" not in message,
            "peak_growth_mb": round((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024, 1),
            "message": message[:200]}


def bench_configs(tmp: Path) -> dict[str, dict]:
    from envace.config import load_config
    from envace.trainers.config import TrainConfig

    items = ["&a0 [lol]"] + [f"&a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 7)]
    bomb = "[" + ", ".join(items) + "]"
    long = "x" * 1_000_000
    path = tmp / "long.yaml"
    path.write_text(f's: &s "{long}"\nl: [' + ", ".join(["*s"] * 100) + "]\n")
    return {
        f"override alias bomb ({len(bomb)} characters)": _timed_config_error(
            lambda: load_config(TrainConfig, None, [f"notes={bomb}"])),
        "1 MB string through 100 aliases (file)": _timed_config_error(lambda: load_config(TrainConfig, path)),
        "1 MB string through 100 aliases (override)": _timed_config_error(
            lambda: load_config(TrainConfig, None, [f'notes=[&s "{long}", ' + ", ".join(["*s"] * 100) + "]"])),
    }


def bench_sweep(tmp: Path) -> dict[str, dict]:
    import yaml

    from envace.config import ConfigError
    from envace.sweeps.grid import SweepConfig
    from envace.sweeps.preflight import preflight

    spec = {"name": "huge", "overrides": ["model=/models/tiny"], "out_dir": str(tmp / "huge"),
            "axes": {"steps": list(range(1, 101)), "seed": list(range(100)), "k": list(range(2, 102))}}
    t0 = time.perf_counter()
    try:
        preflight(SweepConfig(**spec))
        message = "(accepted)"
    except ConfigError as exc:
        message = str(exc)
    out = {"preflight": {"seconds": round(time.perf_counter() - t0, 3), "message": message[:200]}}
    path = tmp / "huge.yaml"
    path.write_text(yaml.safe_dump(spec))
    t0 = time.perf_counter()
    res = subprocess.run([sys.executable, "-m", "envace.cli", "sweep", "run", "--dry-run", str(path)], cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True)
    out["envace sweep run --dry-run"] = {"seconds (incl. start-up)": round(time.perf_counter() - t0, 3),
                                         "exit": res.returncode, "stderr": res.stderr.strip()[:200],
                                         "cells_dir_exists": (tmp / "huge" / "cells").exists()}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--light", action="store_true", help="2 requests of 1.5 MB per part (a quick check).")
    ap.add_argument("--mb", type=float, default=7.0, help="Size of the hostile string per request (MB).")
    ap.add_argument("--concurrent", type=int, default=6, help="Requests sent at once per request part.")
    ap.add_argument("--model", type=Path, default=None, help="Model dir to serve (default: a tiny one built now).")
    ap.add_argument("--only", choices=["serve", "configs", "sweep"], action="append", help="Run these parts only.")
    a = ap.parse_args()
    mb, concurrent = (1.5, 2) if a.light else (a.mb, a.concurrent)
    parts = a.only or ["serve", "configs", "sweep"]
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        report: dict = {"mode": "light" if a.light else "full", "mb": mb, "concurrent": concurrent}
        if "serve" in parts:
            report["serve"] = bench_serve(a.model or _tiny_model(tmp), mb, concurrent)
        if "configs" in parts:
            report["configs"] = bench_configs(tmp)
        if "sweep" in parts:
            report["sweep"] = bench_sweep(tmp)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
