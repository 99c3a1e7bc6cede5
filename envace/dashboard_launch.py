"""`envace dashboard`: start the Streamlit dashboard (dashboard/app.py) headless on host:port.

The store location and the MLflow URI travel to the app both as environment variables
(`ENVACE_DASHBOARD_STORE`, `ENVACE_DASHBOARD_MLFLOW_URI`) and as the script's arguments after `--`, so the
app reads the same settings however it was started — except a URL holding a password, which travels in the
environment only (a command line is visible to every user of the machine in `ps`), and is printed masked.
The server binds 127.0.0.1 unless told otherwise,
sends no usage statistics, watches no files and runs until interrupted; `launch` returns its exit code.
Streamlit and plotly come with the dashboard extra; `launch` checks both before it starts the server.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

from envace.secrets import has_secret, mask_text

ENV_STORE = "ENVACE_DASHBOARD_STORE"  # read by dashboard/settings.py
ENV_MLFLOW = "ENVACE_DASHBOARD_MLFLOW_URI"


def app_path() -> Path:
    """app.py of the installed `envace_dashboard` package (the repository's dashboard/ folder in an editable
    install); Streamlit runs it by path."""
    spec = importlib.util.find_spec("envace_dashboard")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("the `envace_dashboard` package is not installed next to envace; reinstall the "
                                "project (pip install -e .)")
    app = Path(list(spec.submodule_search_locations)[0]) / "app.py"
    if not app.is_file():
        raise FileNotFoundError(f"{app} is missing; reinstall the project (pip install -e .)")
    return app


def dashboard_command(store: str | Path, mlflow_uri: str | None = None, host: str = "127.0.0.1",
                      port: int = 8501) -> tuple[list[str], dict[str, str]]:
    """(argv, environment) that start the dashboard server."""
    if not 0 < int(port) < 65536:
        raise ValueError(f"port {port} is not a TCP port (1-65535)")
    if not str(host).strip():
        raise ValueError("host is empty; pass 127.0.0.1 (this machine only) or an address to bind")
    store = str(store)
    cmd = [sys.executable, "-m", "streamlit", "run", str(app_path()),
           "--server.headless", "true", "--server.address", str(host), "--server.port", str(int(port)),
           "--server.fileWatcherType", "none", "--server.runOnSave", "false",
           "--browser.gatherUsageStats", "false", "--global.developmentMode", "false",
           "--client.toolbarMode", "minimal",
           "--"]
    if not has_secret(store):
        cmd += ["--store", store]
    env = dict(os.environ)
    env[ENV_STORE] = store
    env.pop(ENV_MLFLOW, None)
    if mlflow_uri:
        if not has_secret(str(mlflow_uri)):
            cmd += ["--mlflow-uri", str(mlflow_uri)]
        env[ENV_MLFLOW] = str(mlflow_uri)
    env.setdefault("STREAMLIT_BROWSER_GATHER_USAGE_STATS", "false")
    env.setdefault("MLFLOW_ENABLE_TELEMETRY", "false")
    return cmd, env


def launch(store: str | Path, mlflow_uri: str | None = None, host: str = "127.0.0.1", port: int = 8501) -> int:
    """Run the dashboard server in the foreground until it exits or is interrupted; returns its exit code."""
    from envace.extras import check
    from envace.store.session import to_url

    url = to_url(store)  # validates the location; the file itself is checked by the app's pages
    for module in ("streamlit", "plotly"):  # the app runs in another process: say what is missing here
        check(module, "dashboard", "`envace dashboard`")
    if url.get_backend_name() == "sqlite" and url.database and not Path(url.database).is_file():
        print(f"warning: store {url.database} does not exist yet; the dashboard will say so until a run writes it",
              file=sys.stderr)
    cmd, env = dashboard_command(store, mlflow_uri, host, port)
    print(f"envace dashboard: http://{host}:{port}  (store {mask_text(str(store))}, "
          f"MLflow {mask_text(str(mlflow_uri)) if mlflow_uri else 'auto'})", file=sys.stderr)
    proc = subprocess.Popen(cmd, env=env)

    def _forward(signum, _frame):  # noqa: ANN001 - a terminated launcher must not orphan the server
        proc.send_signal(signum)

    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGTERM, _forward)
    try:
        return proc.wait()
    except KeyboardInterrupt:
        proc.send_signal(signal.SIGINT)
        try:
            return proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            return proc.wait()
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
