"""What `envace train --backend verl` checks before `main_ppo` starts, each failure one line naming the
fix. verl itself finds these late: a missing parquet after Ray and the tokenizer are up, too few GPUs
(`_check_resource_available`: "Total available GPUs 8 is less than total desired GPUs 16") only after
the datasets were loaded, a dead judge never (every episode is unscored and the steps learn nothing),
and an unset MLflow address not at all (verl logs to `sqlite:////tmp/mlruns.db` on whichever node runs
its driver).

Order: the environment (MLflow), the data files, the endpoints (one probe chat completion each: the
judge for `reward=checklist_llm`, the simulator for `mode=simulator`), then the Ray cluster's GPUs
(`gpu_problem` is a pure function of the per-node GPU counts; `ray_node_gpus` asks the cluster).
The endpoints are probed from this machine: the workers must reach the same address (one node: yes;
several: use an address every node resolves).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path

from envace.config import ConfigError
from envace.trainers.verl.config import EndpointConfig, VerlLaunchConfig

REMOTE_PREFIXES = ("hdfs://", "s3://", "gs://", "http://", "https://")
PROBE_TIMEOUT_S = 30.0
ONE_NODE_CONFIG = "configs/verl/qwen3_8b_cm2_1node.yaml"


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def mlflow_problem(cfg: VerlLaunchConfig, environ: dict[str, str]) -> str | None:
    if "mlflow" in cfg.loggers and not environ.get("MLFLOW_TRACKING_URI"):
        return ("loggers has mlflow but MLFLOW_TRACKING_URI is unset: verl would log to sqlite:////tmp/mlruns.db on "
                "the node that runs its driver; export MLFLOW_TRACKING_URI=http://<mlflow-host>:5000 (a server "
                "every node reaches) or drop mlflow from loggers")
    return None


def data_problems(cfg: VerlLaunchConfig) -> list[str]:
    """Local data files that are missing (remote URIs are verl's to copy and are not checked)."""
    problems = []
    for field in ("train_files", "val_files"):
        for i, path in enumerate(getattr(cfg, field)):
            if path.startswith(REMOTE_PREFIXES) or Path(path).is_file():
                continue
            problems.append(f"{field}[{i}] = {path} is not a file here; write it with `envace data export "
                            f"<cm2.jsonl> {path}` on storage every node reads, or fix {field}")
    return problems


def probe_endpoint(endpoint: EndpointConfig, field: str, environ: dict[str, str]) -> str | None:
    """One chat completion of one token against `endpoint`; None when it answers, else the problem."""
    from envace.engines.openai_client import ChatClientError, OpenAIChatClient

    key = None
    if endpoint.api_key_env:
        key = environ.get(endpoint.api_key_env)
        if not key:
            return (f"{field}.api_key_env names {endpoint.api_key_env}, which is unset here; export it (the launcher "
                    "forwards it to the workers) or clear the field")
    try:
        with OpenAIChatClient(endpoint.base_url, endpoint.model, api_key=key, max_retries=0,
                              timeout=min(endpoint.timeout_s, PROBE_TIMEOUT_S)) as client:
            client.chat([{"role": "user", "content": "Reply with OK."}], max_tokens=1)
    except (ChatClientError, OSError) as exc:
        return (f"{field} {endpoint.base_url} (model {endpoint.model}) did not answer a probe chat completion "
                f"({_one_line(exc)}); start it (docs/gpu.md, 'Judge server') or fix {field}.base_url / {field}.model")
    return None


def endpoint_problems(cfg: VerlLaunchConfig, environ: dict[str, str]) -> list[str]:
    loop, out = cfg.loop, []
    if loop.reward == "checklist_llm" and loop.judge is not None:
        out.append(probe_endpoint(loop.judge, "loop.judge", environ))
    if loop.mode == "simulator" and loop.simulator is not None:
        out.append(probe_endpoint(loop.simulator, "loop.simulator", environ))
    return [p for p in out if p]


def gpu_problem(node_gpus: Sequence[float], *, nnodes: int, per_node: int, pools: int = 1,
                address: str = "<RAY_ADDRESS>") -> str | None:
    """None when the cluster can hold `pools` x `nnodes` groups of `per_node` GPUs, each group on one node
    (verl places each node's bundles with STRICT_PACK); else the problem, naming the fix."""
    slots = sum(int(g // per_node) for g in node_gpus if g > 0)
    need = nnodes * pools
    if slots >= need:
        return None
    have = sum(node_gpus)
    nodes = ", ".join(f"{g:g}" for g in node_gpus) or "none"
    twice = " x 2 pools (policy=per_role)" if pools > 1 else ""
    return (f"the Ray cluster at {address} has {have:g} GPUs (per node: {nodes}); the config asks for nnodes {nnodes} "
            f"x n_gpus_per_node {per_node}{twice} = {need * per_node} GPUs, {per_node} on each of {need} node(s): set "
            f"nnodes / n_gpus_per_node to what Ray holds (one 8-GPU node with its judge: {ONE_NODE_CONFIG}), or "
            "add nodes")


def ray_node_gpus(address: str) -> list[float]:
    """GPUs of each live node of the Ray cluster at `address` (connects as a driver, then disconnects)."""
    from envace.trainers.verl.deps import require

    ray = require("ray")
    if ray.is_initialized():
        return [float(n.get("Resources", {}).get("GPU", 0.0)) for n in ray.nodes() if n.get("Alive")]
    try:
        ray.init(address=address, log_to_driver=False, logging_level="ERROR")
    except Exception as exc:  # noqa: BLE001 - any failure to connect has the same fix
        raise ConfigError(f"cannot connect to the Ray cluster at {address} ({type(exc).__name__}: "
                          f"{_one_line(exc)[:200]}); start it (`ray start --head --port 6379`) or fix RAY_ADDRESS / "
                          "ray_address") from None
    try:
        return [float(n.get("Resources", {}).get("GPU", 0.0)) for n in ray.nodes() if n.get("Alive")]
    finally:
        ray.shutdown()


def preflight(cfg: VerlLaunchConfig, environ: dict[str, str] | None = None, *, address: str,
              node_gpus: Callable[[str], Sequence[float]] = ray_node_gpus) -> None:
    """Raise `ConfigError` (one line) on the first failing group of checks; see the module docstring."""
    environ = dict(os.environ if environ is None else environ)
    problem = mlflow_problem(cfg, environ)
    problems = [problem] if problem else data_problems(cfg) or endpoint_problems(cfg, environ)
    if not problems:
        problem = gpu_problem(node_gpus(address), nnodes=cfg.nnodes, per_node=cfg.n_gpus_per_node,
                              pools=2 if cfg.policy == "per_role" else 1, address=address)
        problems = [problem] if problem else []
    if problems:
        raise ConfigError("verl preflight: " + "; ".join(problems))
