"""Sweep cells on a Ray cluster: the sweep YAML's `runner: {kind: ray, address, num_cpus, num_gpus}`.

Each cell is one Prefect task run submitted through Prefect's Ray integration (`prefect-ray`'s
`RayTaskRunner`): the task engine itself runs inside a Ray task, so Prefect's caching (the cell cache
key and the JSON result under `<sweep out_dir>/.prefect-results`), retries, states and the MLflow child
run all behave as in the local process pool. Every cell is submitted with its own resource request
(`ray.remote(num_cpus=..., num_gpus=...)` through prefect-ray's `remote_options`), so Ray places cells
on nodes that have the CPUs / GPUs free and runs as many at once as the cluster holds.

What a multi-node cluster needs (the runner cannot check it from one machine):
- every node has the same envace install at the same path (as for verl, docs/gpu.md);
- the sweep's `out_dir` and the MLflow store are reachable from every node (a shared filesystem, or an
  MLflow server URI for `mlflow_uri`); Prefect's API must be a server every node reaches
  (`PREFECT_API_URL`), not the flow's temporary one on 127.0.0.1.

The cells' cache keys use the driver's code version (`ENVACE_CODE_VERSION` in the workers' environment),
so a cell is cached or not exactly as in the local pool, whatever checkout the node has.

Ray 2.60 clusters authenticate clients with a token: `auth_token_path` (or Ray's own RAY_AUTH_TOKEN /
RAY_AUTH_TOKEN_PATH / ~/.ray/auth_token) is used to connect; the token itself is never logged.

Departure from prefect-ray's default: no temporary local cluster is ever created -- a sweep that asks for
Ray names the cluster (`address`, or $RAY_ADDRESS), and a driver already connected to another cluster
is an error instead of being silently reused.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from enum import Enum
from typing import Any

from pydantic import Field, model_validator

from envace.config import BaseConfig, ConfigError

RAY_ADDRESS_ENV = "RAY_ADDRESS"
# forwarded to the cells' Ray workers when set in the flow's environment (offline flags, MLflow, Prefect)
FORWARDED_ENV = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE", "HF_HOME", "MLFLOW_TRACKING_URI",
                 "PREFECT_API_URL", "ENVACE_CODE_VERSION", "ENVACE_ENGINE", "OMP_NUM_THREADS")


class RunnerKind(str, Enum):
    LOCAL = "local"  # threads / a process pool on this machine (max_workers, task_runner)
    RAY = "ray"  # one Ray task per cell on the cluster at `address`


class RunnerConfig(BaseConfig):
    """Where a sweep's cells run."""

    kind: RunnerKind = Field(RunnerKind.LOCAL, description="local (this machine's pool) or ray (a Ray cluster).")
    address: str | None = Field(None,
                                description="Ray GCS address host:port (or ray://host:10001); None: $RAY_ADDRESS.")
    num_cpus: float = Field(1.0, gt=0, description="CPUs each cell asks Ray for.")
    num_gpus: float = Field(0.0, ge=0, description="GPUs each cell asks Ray for (fractions share a GPU).")
    auth_token_path: str | None = Field(None, description="File with the cluster's Ray auth token (None: Ray's "
                                                          "RAY_AUTH_TOKEN(_PATH) or ~/.ray/auth_token).")
    env: dict[str, str] = Field(default_factory=dict, description="Extra environment variables of the cells' workers.")

    @model_validator(mode="after")
    def _check(self) -> RunnerConfig:
        if self.kind is RunnerKind.LOCAL and (self.address or self.auth_token_path):
            raise ConfigError("runner.address / runner.auth_token_path are set but runner.kind is local; "
                              "set runner.kind: ray to run the cells on that Ray cluster")
        return self

    def resolved_address(self) -> str:
        address = self.address or os.environ.get(RAY_ADDRESS_ENV)
        if not address:
            raise ConfigError("runner.kind is ray but no cluster is named: set runner.address (host:port of the "
                              "head's GCS, e.g. 10.0.0.1:6379) or export RAY_ADDRESS; start one with "
                              "`ray start --head --port 6379`")
        return address

    def remote_options(self) -> dict[str, float]:
        """The resource request of one cell (`ray.remote(**...)`)."""
        return {"num_cpus": self.num_cpus, "num_gpus": self.num_gpus}


def worker_env(cfg: RunnerConfig, environ: dict[str, str] | None = None) -> dict[str, str]:
    environ = os.environ if environ is None else environ
    return {**{k: environ[k] for k in FORWARDED_ENV if environ.get(k)}, **cfg.env}


def prefect_api_url() -> str | None:
    """The Prefect API the flow talks to, including the flow's temporary server (which the settings do
    not name). The cells' workers report to it; without it each worker would start a temporary server
    of its own and the cell runs would be missing from the flow's server."""
    from prefect.context import FlowRunContext
    from prefect.settings import get_current_settings

    url = get_current_settings().api.url
    if url:
        return str(url)
    ctx = FlowRunContext.get()
    client = getattr(ctx, "client", None) if ctx else None
    return str(client.api_url) if client is not None else None


_AUTH_ENV = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN_PATH")


def use_token_auth(token_path: str | None) -> dict[str, str | None]:
    """Connect with token authentication when a token is named or available (Ray's own rule for a
    local cluster, applied to an explicit address too); an explicit RAY_AUTH_MODE is kept unless a
    token file is named. Ray reads the mode into a process-wide config and caches the token, so both
    are refreshed here (a process that imported ray earlier would otherwise connect without them).
    Returns the previous values of the variables it sets, for `restore_auth` after disconnecting."""
    from ray._raylet import AuthenticationTokenLoader, Config

    previous = {k: os.environ.get(k) for k in _AUTH_ENV}
    loader = AuthenticationTokenLoader.instance()
    if token_path:
        if not os.path.isfile(token_path):
            raise ConfigError(f"runner.auth_token_path {token_path} does not exist; copy the cluster's token "
                              f"there (`ray get-auth-token` on the head) or leave the field out")
        os.environ["RAY_AUTH_TOKEN_PATH"] = token_path
        os.environ["RAY_AUTH_MODE"] = "token"
    elif os.environ.get("RAY_AUTH_MODE") is None:
        loader.reset_cache()
        if loader.has_token(ignore_auth_mode=True):
            os.environ["RAY_AUTH_MODE"] = "token"
    Config.initialize("")
    loader.reset_cache()
    return previous


def restore_auth(previous: dict[str, str | None]) -> None:
    """Put RAY_AUTH_MODE / RAY_AUTH_TOKEN_PATH back as they were (a later local `ray.init` must not read a
    token file of a cluster that is gone)."""
    from ray._raylet import AuthenticationTokenLoader, Config

    for key, value in previous.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    Config.initialize("")
    AuthenticationTokenLoader.instance().reset_cache()


def ray_task_runner(cfg: RunnerConfig):
    """A prefect-ray task runner connected to the cluster of `cfg` (see the module docstring)."""
    from envace.extras import require
    from envace.sweeps.cache import CODE_VERSION_ENV, code_version

    RayTaskRunner = require("prefect_ray", "flows", "a sweep with runner.kind=ray").RayTaskRunner

    class EnvaceRayTaskRunner(RayTaskRunner):
        def __init__(self, runner_cfg: RunnerConfig) -> None:
            self.runner_cfg = runner_cfg
            super().__init__(address=runner_cfg.resolved_address())

        def duplicate(self) -> EnvaceRayTaskRunner:
            return type(self)(self.runner_cfg)

        def __enter__(self):
            import ray

            if ray.is_initialized():
                raise ConfigError(f"this process is already connected to a Ray cluster; the sweep asks for "
                                  f"{self.address}: call ray.shutdown() first or run the sweep in its own process")
            self._auth_before = use_token_auth(self.runner_cfg.auth_token_path)
            env = worker_env(self.runner_cfg)
            # the cells' cache keys use the driver's code version, as in the local pool: a worker computing
            # its own would see another checkout (or a tree edited since the sweep started) and miss the cache
            env.setdefault(CODE_VERSION_ENV, code_version())
            api = prefect_api_url()
            if api and "PREFECT_API_URL" not in env:
                env["PREFECT_API_URL"] = api
            self.init_kwargs["runtime_env"] = {"env_vars": env}
            try:
                return super().__enter__()
            except BaseException:
                restore_auth(self._auth_before)
                raise

        def __exit__(self, *exc_info: Any) -> None:
            try:
                super().__exit__(*exc_info)
            finally:
                restore_auth(self._auth_before)

    return EnvaceRayTaskRunner(cfg)


@contextmanager
def cell_resources(cfg: RunnerConfig) -> Iterator[None]:
    """Inside it, a task submitted to a Ray runner asks for the cell's CPUs / GPUs; a no-op locally."""
    if cfg.kind is not RunnerKind.RAY:
        yield
        return
    from prefect_ray.context import remote_options

    with remote_options(**cfg.remote_options()):
        yield


def placement() -> dict[str, Any]:
    """Where the calling cell runs: {"runner": "ray", node id, resources Ray assigned} inside a Ray
    worker, else {"runner": "local"} (recorded in the cell's record, so a test and a user can see it)."""
    ray = sys.modules.get("ray")  # a Ray worker has imported ray; a local cell need not pay for the import
    if ray is None or not ray.is_initialized():
        return {"runner": "local"}
    ctx = ray.get_runtime_context()
    if ctx.worker.mode != 1:  # ray's WORKER_MODE; the driver (SCRIPT_MODE 0) is not a placement
        return {"runner": "local"}
    res = {k: float(v) for k, v in ctx.get_assigned_resources().items() if not k.startswith("node:")}
    return {"runner": "ray", "node_id": ctx.get_node_id(), "resources": res}
