"""Store test fixtures: a real PostgreSQL server (Debian's package) for the session, and `store_url`,
parametrised over [sqlite, postgres], giving each test a fresh empty database.

The server runs from a temp dir on 127.0.0.1 and a free port, as the `postgres` user when we are root
(initdb refuses root), with fsync off (test data only). It is stopped and removed after the session.
Without the binaries the postgres cases skip; `.ci/run` installs them (scripts/system_deps.sh).
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
import uuid
from pathlib import Path

import pytest

PG_SKIP = ("PostgreSQL server binaries not found under /usr/lib/postgresql/*/bin; `.ci/run` installs them "
           "(scripts/system_deps.sh: apt-get install postgresql)")


def _pg_bindir() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4]))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PgServer:
    def __init__(self, bindir: Path) -> None:
        self.bindir = bindir
        self.root = Path(tempfile.mkdtemp(prefix="envace-pg-"))
        self.data = self.root / "data"
        self.port = _free_port()
        self.as_user: list[str] = []
        if os.geteuid() == 0:
            shutil.chown(self.root, "postgres")
            self.as_user = ["runuser", "-u", "postgres", "--"]

    def _run(self, *args: str) -> None:
        res = subprocess.run([*self.as_user, *args], capture_output=True, text=True, timeout=180)
        if res.returncode != 0:
            raise RuntimeError(f"{' '.join(args)} failed ({res.returncode}):\n{res.stdout}\n{res.stderr}")

    def start(self) -> None:
        self._run(str(self.bindir / "initdb"), "-D", str(self.data), "-U", "postgres", "--auth=trust",
                  "-E", "UTF8", "--no-sync", "--no-instructions")
        opts = (f"-h 127.0.0.1 -p {self.port} -k {self.root} -c fsync=off -c synchronous_commit=off "
                f"-c full_page_writes=off -c max_connections=80")
        self._run(str(self.bindir / "pg_ctl"), "-D", str(self.data), "-l", str(self.root / "log"),
                  "-o", opts, "-w", "-t", "120", "start")

    def stop(self) -> None:
        try:
            self._run(str(self.bindir / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "stop")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)

    def url(self, db: str = "postgres") -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{db}"

    def admin(self, sql: str) -> None:
        import psycopg

        with psycopg.connect(f"host=127.0.0.1 port={self.port} user=postgres dbname=postgres",
                             autocommit=True) as conn:
            conn.execute(sql)


@pytest.fixture(scope="session")
def pg_server():
    bindir = _pg_bindir()
    if bindir is None:
        pytest.skip(PG_SKIP)
    server = PgServer(bindir)
    try:
        server.start()
    except Exception:
        server.stop()
        raise
    yield server
    server.stop()


BACKENDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


def _fresh_store(request, backend: str, directory: Path):
    """Generator: a fresh empty database URL on `backend`, dropped afterwards."""
    if backend == "sqlite":
        yield str(directory / f"store-{uuid.uuid4().hex[:8]}.db")
        return
    server: PgServer = request.getfixturevalue("pg_server")
    name = f"t_{uuid.uuid4().hex[:12]}"
    server.admin(f"CREATE DATABASE {name}")
    yield server.url(name)
    server.admin(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.fixture(params=BACKENDS)
def store_url(request, tmp_path):
    """A fresh, empty store database (no schema yet) on each backend, per test."""
    yield from _fresh_store(request, request.param, tmp_path)


@pytest.fixture(scope="module", params=BACKENDS)
def module_store_url(request, tmp_path_factory):
    """A fresh, empty store database on each backend, shared by one test module (for seeded data)."""
    yield from _fresh_store(request, request.param, tmp_path_factory.mktemp("store"))


@pytest.fixture
def run_python(tmp_path):
    """Start `code` in a fresh Python process (the store must work across processes, not threads)."""
    procs: list[subprocess.Popen] = []

    def start(code: str, *args: str) -> subprocess.Popen:
        script = tmp_path / f"proc_{len(procs)}.py"
        script.write_text(textwrap.dedent(code))
        p = subprocess.Popen([sys.executable, str(script), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
        procs.append(p)
        return p

    yield start
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()
