"""Passwords are never shown: `envace dashboard` prints its store and MLflow URLs masked
and keeps a URL with a password off the server's command line (visible in `ps`), passing it in the
environment only; the Runs page's "Resolved config" panel and the config diff mask a password even in a
run stored before masking existed."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa
from streamlit.testing.v1 import AppTest

from envace.dashboard_launch import ENV_MLFLOW, ENV_STORE, app_path, dashboard_command

pytestmark = pytest.mark.dashboard
STORE = "postgresql+psycopg://envace:PASSWORD-1@127.0.0.1:1/runs"
MLFLOW = "https://tracker.example/api?token=PASSWORD-2"


def test_command_line_holds_no_password_and_the_environment_holds_the_real_urls():
    cmd, env = dashboard_command(STORE, MLFLOW, port=8600)
    assert not any("PASSWORD" in a for a in cmd)
    assert "--store" not in cmd and "--mlflow-uri" not in cmd
    assert (env[ENV_STORE], env[ENV_MLFLOW]) == (STORE, MLFLOW)
    plain, _ = dashboard_command("runs/store.db", "sqlite:////x/mlflow.db", port=8600)
    assert plain[plain.index("--"):] == ["--", "--store", "runs/store.db", "--mlflow-uri", "sqlite:////x/mlflow.db"]


def test_launch_line_and_server_process_show_no_password(tmp_path, wait_until_healthy):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    # the URLs reach the launcher through its environment, so no command line of the group may show them
    code = ("import os, sys; from envace.dashboard_launch import launch; "
            "sys.exit(launch(os.environ['T_STORE'], os.environ['T_MLFLOW'], port=int(sys.argv[1])))")
    log = tmp_path / "server.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-c", code, str(port)], stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True, env={**os.environ, "T_STORE": STORE, "T_MLFLOW": MLFLOW})
    try:
        wait_until_healthy(proc, port, log, 180)
        server_cmdlines = []
        for pid_dir in Path("/proc").iterdir():
            if pid_dir.name.isdigit():
                try:
                    if os.getpgid(int(pid_dir.name)) == proc.pid:
                        server_cmdlines.append((pid_dir / "cmdline").read_bytes().decode(errors="replace"))
                except (ProcessLookupError, FileNotFoundError, PermissionError):
                    continue
        assert any("streamlit" in c for c in server_cmdlines)
        assert not any("PASSWORD" in c for c in server_cmdlines)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=60)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    text = log.read_text()
    assert "envace dashboard: http://127.0.0.1" in text and "envace:***@127.0.0.1:1/runs" in text
    assert "token=***" in text and "PASSWORD" not in text


def test_resolved_config_panel_masks_a_legacy_stored_password(tmp_path, monkeypatch):
    from envace.store.runs import RunInfo, register_run
    from envace.store.session import make_engine, upgrade

    store = tmp_path / "store.db"
    engine = make_engine(store)
    upgrade(engine)
    for rid in ("run-old", "run-new"):
        register_run(engine, RunInfo(id=rid, name=rid, config={"tracking": {"store_url": "x"}}))
    legacy = {"tracking": {"store_url": STORE, "mlflow_uri": MLFLOW}, "rollout": {"mode": "env"}}
    with engine.begin() as c:  # written raw, as a run stored before masking existed would be
        c.execute(sa.text("UPDATE runs SET config = :c WHERE id = 'run-old'"), {"c": json.dumps(legacy)})
    engine.dispose()
    monkeypatch.setenv("ENVACE_DASHBOARD_STORE", str(store))
    monkeypatch.setenv("ENVACE_DASHBOARD_MLFLOW_URI", str(tmp_path / "no-mlflow"))
    at = AppTest.from_file(str(app_path()), default_timeout=120).run()
    at.selectbox(key="open_run").set_value("run-old")
    at.selectbox(key="cmp_a").set_value("run-old")
    at.selectbox(key="cmp_b").set_value("run-new")
    at.toggle(key="only_diff").set_value(False)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    [panel] = [j for j in at.json if "tracking" in json.loads(j.proto.body)]
    shown = json.loads(panel.proto.body)
    assert shown["tracking"] == {"store_url": "postgresql+psycopg://envace:***@127.0.0.1:1/runs",
                                 "mlflow_uri": "https://tracker.example/api?token=***"}
    diff = [d.value for d in at.dataframe if "differs" in d.value.columns][0]
    assert "PASSWORD" not in diff.to_csv() and "envace:***@" in diff.to_csv()
