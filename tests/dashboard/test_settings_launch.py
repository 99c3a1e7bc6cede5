"""Settings resolution (never creating an MLflow database) and the launcher's server command."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys

import pytest

from envace.dashboard_launch import ENV_MLFLOW, ENV_STORE, app_path, dashboard_command
from envace_dashboard.settings import load_settings, resolve_mlflow_uri


def test_command_binds_loopback_by_default_and_passes_settings(tmp_path):
    cmd, env = dashboard_command(tmp_path / "s.db", "sqlite:////x/mlflow.db", port=8600)
    assert cmd[:4] == [sys.executable, "-m", "streamlit", "run"] and cmd[4] == str(app_path())
    assert cmd[cmd.index("--server.address") + 1] == "127.0.0.1"
    assert cmd[cmd.index("--server.port") + 1] == "8600"
    assert cmd[cmd.index("--server.headless") + 1] == "true"
    assert cmd[cmd.index("--browser.gatherUsageStats") + 1] == "false"
    tail = cmd[cmd.index("--") + 1:]
    assert tail == ["--store", str(tmp_path / "s.db"), "--mlflow-uri", "sqlite:////x/mlflow.db"]
    assert env[ENV_STORE] == str(tmp_path / "s.db") and env[ENV_MLFLOW] == "sqlite:////x/mlflow.db"
    cmd, env = dashboard_command("s.db", None, host="0.0.0.0", port=1)
    assert cmd[cmd.index("--server.address") + 1] == "0.0.0.0" and ENV_MLFLOW not in env
    assert "--mlflow-uri" not in cmd


@pytest.mark.parametrize("kw, msg", [({"port": 0}, "not a TCP port"), ({"port": 70000}, "not a TCP port"),
                                     ({"host": " "}, "host is empty")])
def test_command_rejects_bad_host_or_port(kw, msg):
    with pytest.raises(ValueError, match=msg):
        dashboard_command("s.db", None, **kw)


def test_mlflow_uri_resolution_never_creates(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the last place looked at is ./mlruns
    store = tmp_path / "run" / "store.db"
    uri, err = resolve_mlflow_uri(None, str(store))
    assert uri is None and "--mlflow-uri" in err
    db = tmp_path / "mlflow" / "mlflow.db"  # where the trainer puts it: <out_dir>/../mlflow
    db.parent.mkdir()
    db.write_bytes(b"")
    assert resolve_mlflow_uri(None, str(store)) == (f"sqlite:///{db}", None)
    assert resolve_mlflow_uri(str(db.parent), "x.db") == (f"sqlite:///{db}", None)
    assert resolve_mlflow_uri(f"sqlite:///{db}", "x.db") == (f"sqlite:///{db}", None)
    missing = tmp_path / "nope" / "mlflow.db"
    uri, err = resolve_mlflow_uri(f"sqlite:///{missing}", "x.db")
    assert uri is None and str(missing) in err and not missing.parent.exists()
    assert resolve_mlflow_uri("http://127.0.0.1:5000", "x.db") == ("http://127.0.0.1:5000", None)


def test_command_line_wins_over_environment(tmp_path):
    env = {ENV_STORE: "env.db", ENV_MLFLOW: "http://env:1"}
    s = load_settings(["--store", "arg.db", "--mlflow-uri", "http://arg:2"], env)
    assert (s.store, s.mlflow_uri) == ("arg.db", "http://arg:2")
    s = load_settings([], env)
    assert (s.store, s.mlflow_uri) == ("env.db", "http://env:1")
    assert load_settings(["--sto", "x"], {}).store == "runs/demo/store.db"  # no abbreviations


@pytest.mark.dashboard
def test_terminating_the_launcher_stops_the_server(tmp_path, wait_until_healthy):
    """`launch` forwards SIGTERM: killing `envace dashboard` leaves no Streamlit server behind."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    code = ("import sys; from envace.dashboard_launch import launch; "
            "sys.exit(launch(sys.argv[1], None, port=int(sys.argv[2])))")
    log = tmp_path / "server.log"
    with open(log, "wb") as out:  # a store that does not exist: the server starts, its pages say so
        proc = subprocess.Popen([sys.executable, "-c", code, str(tmp_path / "s.db"), str(port)], stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_until_healthy(proc, port, log, 180)
        os.kill(proc.pid, signal.SIGTERM)  # the launcher only, not its process group
        proc.wait(timeout=60)
        with pytest.raises(ProcessLookupError):
            os.killpg(proc.pid, 0)  # nothing left in the group: the server exited with the launcher
        assert not (tmp_path / "s.db").exists()
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()
