"""A Ray head node on 127.0.0.1 that this process starts and stops: the stand-in for "an existing Ray
cluster" in tests and laptop runs of the cluster paths (sweeps on Ray, the cluster pipeline).

`LocalRayHead` runs `ray start --head --block` (the same command an operator runs on a head node) in a
new session, with every port it opens chosen free on 127.0.0.1 and its own short temp dir, so it
neither collides with another Ray on the machine nor reads its address file. `stop()` signals only
that session's process group (the `ray start` process and the GCS, raylet and workers it spawned) --
never `ray stop`, which kills every Ray process of the user on the machine.

Departure from a real cluster: one node, bound to loopback, no dashboard.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

_PORT_FLAGS = ("--ray-client-server-port", "--node-manager-port", "--object-manager-port",
               "--dashboard-agent-listen-port", "--dashboard-agent-grpc-port", "--runtime-env-agent-port",
               "--metrics-export-port", "--dashboard-port")
ADDRESS_FILE = "ray_current_cluster"  # written by `ray start` into its temp dir once the node is up


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def ray_executable() -> str:
    """The `ray` script beside this interpreter (the workers must run the same environment)."""
    exe = Path(sys.executable).with_name("ray")
    if exe.is_file():
        return str(exe)
    found = shutil.which("ray")
    if not found:
        raise FileNotFoundError("no `ray` command beside the Python interpreter or on PATH; Ray comes with the "
                                "cluster extra: pip install 'envace[cluster]'")
    return found


class LocalRayHead:
    """`with LocalRayHead(num_cpus=2) as head: ... head.address ...` (host:port of the GCS)."""

    def __init__(self, num_cpus: int = 2, num_gpus: int = 0, startup_timeout_s: float = 300.0,
                 env: dict[str, str] | None = None) -> None:
        self.num_cpus, self.num_gpus, self.startup_timeout_s = num_cpus, num_gpus, startup_timeout_s
        self.env = env
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"  # until started; then as the head advertises it
        # short path: Ray's unix sockets live under it and must stay under ~100 characters
        self.temp_dir = Path(tempfile.mkdtemp(prefix="envace-ray-", dir="/tmp"))
        self.proc: subprocess.Popen | None = None
        self.token_path = self._write_token()

    def _write_token(self) -> Path:
        """Ray 2.60 clusters use token authentication: this head gets its own random token, and a driver
        connects with `client_env()` in its environment (RAY_AUTH_MODE=token + the token file)."""
        token = self.temp_dir / "auth_token"
        token.write_text(secrets.token_hex(32))
        token.chmod(0o600)
        return token

    def client_env(self) -> dict[str, str]:
        """Environment a driver needs to connect (the head's own environment has it too)."""
        return {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(self.token_path)}

    def command(self) -> list[str]:
        cmd = [ray_executable(), "start", "--head", "--block", "--port", str(self.port),
               "--num-cpus", str(self.num_cpus), "--num-gpus", str(self.num_gpus),
               "--include-dashboard=false", "--disable-usage-stats", "--temp-dir", str(self.temp_dir)]
        for flag in _PORT_FLAGS:
            cmd += [flag, str(free_port())]
        return cmd

    def start(self, attempts: int = 3) -> LocalRayHead:
        """Start the head; retried because `ray start` gives its raylet a fixed 30 s to register with the
        GCS, which a heavily loaded machine can miss."""
        for attempt in range(1, attempts + 1):
            try:
                return self._start_once()
            except RuntimeError:
                if attempt == attempts:
                    raise
                self.port = free_port()
                self.address = f"127.0.0.1:{self.port}"
                self.temp_dir = Path(tempfile.mkdtemp(prefix="envace-ray-", dir="/tmp"))
                self.token_path = self._write_token()
        return self

    def _start_once(self) -> LocalRayHead:
        env = {**os.environ, **(self.env or {}), "RAY_USAGE_STATS_ENABLED": "0", **self.client_env()}
        log = (self.temp_dir / "head.log").open("w")
        self.proc = subprocess.Popen(self.command(), stdout=log, stderr=subprocess.STDOUT, env=env,
                                     start_new_session=True)
        deadline = time.monotonic() + self.startup_timeout_s
        while not (self.temp_dir / ADDRESS_FILE).is_file():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                tail = (self.temp_dir / "head.log").read_text()[-2000:]
                self.stop()
                raise RuntimeError(f"the local Ray head on port {self.port} did not start within "
                                   f"{self.startup_timeout_s:.0f} s; its log ends with:\n{tail}")
            time.sleep(0.5)
        # the GCS address as the cluster advertises it (the node's IP: Ray rewrites 127.0.0.1 to it)
        self.address = (self.temp_dir / ADDRESS_FILE).read_text().strip()
        return self

    def stop(self, grace_s: float = 5.0) -> None:
        """SIGTERM the head's process group, SIGKILL what is left after `grace_s`; remove the temp dir.

        The grace is short on purpose: `ray start --block` answers SIGTERM by waiting ~30 s for its GCS
        server, and this head's state is temporary (its temp dir is removed below), so nothing is lost by
        killing what has not exited after a few seconds."""
        if self.proc is not None:
            pgid = self.proc.pid  # start_new_session: the group id is the leader's pid
            _signal_group(pgid, signal.SIGTERM)
            deadline = time.monotonic() + grace_s
            try:
                self.proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                pass
            while _group_alive(pgid) and time.monotonic() < deadline:
                time.sleep(0.2)
            _signal_group(pgid, signal.SIGKILL)
            if self.proc.poll() is None:
                self.proc.wait(timeout=10)
            reaped = time.monotonic() + 10.0  # the killed leader's children are reparented and reaped by init
            while _group_has_members(pgid) and time.monotonic() < reaped:
                time.sleep(0.1)
            self.proc = None
        shutil.rmtree(self.temp_dir, ignore_errors=True)

    def __enter__(self) -> LocalRayHead:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _group_has_members(pgid: int) -> bool:
    """Whether any process of the group exists, zombies included."""
    try:
        os.killpg(pgid, 0)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def _group_alive(pgid: int) -> bool:
    """Whether a process of the group still runs (zombies, which only wait to be reaped, do not count)."""
    proc = Path("/proc")
    if not proc.is_dir():  # not Linux: any member, zombie or not
        return _group_has_members(pgid)
    for stat in proc.glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()  # after "pid (comm)": state ppid pgrp ...
        except (OSError, IndexError):
            continue
        if len(fields) > 2 and fields[2] == str(pgid) and fields[0] != "Z":
            return True
    return False
