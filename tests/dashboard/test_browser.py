"""A real browser against `envace dashboard`: Debian's Chromium (headless, driven by playwright) on the
seeded store. Filters the trajectory list, opens the hostile trajectory, checks that Act, Rehearse and
the real response sit side by side, that markup in trajectory text is shown literally (no element made
from it, no script run), and that the server listens on 127.0.0.1 only. Saves a screenshot under
test-artifacts/ (gitignored) for a human to look at.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.dashboard
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
READY_S = 180  # a cold Streamlit + MLflow start on a busy 2-core machine
UI_MS = 120_000

if not Path(CHROMIUM).is_file():
    pytest.skip(f"{CHROMIUM} not found: the browser tests need Debian's chromium package (`.ci/run` installs it; "
                f"apt-get install chromium)", allow_module_level=True)
sync_api = pytest.importorskip("playwright.sync_api", reason="the browser tests need the playwright package "
                               "(pip install -e '.[test]')")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def listening_addresses(port: int) -> set[str]:
    """IPs with a TCP socket in LISTEN state on `port`, read from the kernel's tables."""
    found = set()
    for path, width in (("/proc/net/tcp", 4), ("/proc/net/tcp6", 16)):
        try:
            lines = Path(path).read_text().splitlines()[1:]
        except FileNotFoundError:
            continue
        for line in lines:
            local, state = line.split()[1], line.split()[3]
            addr, p = local.split(":")
            if state != "0A" or int(p, 16) != port:
                continue
            raw = bytes.fromhex(addr)
            if width == 4:
                found.add(socket.inet_ntop(socket.AF_INET, raw[::-1]))
            else:  # four little-endian 32-bit words
                words = b"".join(raw[i:i + 4][::-1] for i in range(0, 16, 4))
                found.add(socket.inet_ntop(socket.AF_INET6, words))
    return found


@pytest.fixture(scope="module")
def server(seeded, tmp_path_factory, wait_until_healthy):
    """`envace dashboard` (the CLI) on a free port, in its own process group."""
    port = _free_port()
    log = tmp_path_factory.mktemp("server") / "server.log"
    cmd = [sys.executable, "-m", "envace.cli", "dashboard", "--store", seeded.store, "--mlflow-uri",
           seeded.mlflow_uri, "--port", str(port)]
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_healthy(proc, port, log, READY_S)
        yield url, port
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


@pytest.fixture(scope="module")
def browser():
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        yield b
        b.close()


def test_server_binds_loopback_only(server):
    _, port = server
    assert listening_addresses(port) == {"127.0.0.1"}


@pytest.mark.slow  # a server start and a browser: ~10-30 s
def test_filter_open_side_by_side_and_markup_stays_text(server, browser, seeded, dc):
    url, _ = server
    page = browser.new_page(viewport={"width": 1700, "height": 2300})
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    page.set_default_timeout(UI_MS)
    page.goto(f"{url}/trajectories?run=run-a", wait_until="domcontentloaded")
    page.get_by_role("heading", name="Trajectories").wait_for()
    n_run = sum(1 for r in seeded.rows if r[0] == "run-a")
    page.get_by_text(re.compile(rf"^{n_run} matching trajectories")).wait_for()

    box = page.get_by_label("Text contains", exact=True)
    box.fill("alert(1)")
    box.press("Enter")
    page.get_by_text(re.compile(r"^1 matching trajectories")).wait_for()

    open_box = page.get_by_label("Open trajectory #", exact=True)
    open_box.fill(str(seeded.hostile_id))
    open_box.press("Enter")
    page.get_by_role("heading", name=f"Trajectory #{seeded.hostile_id}").wait_for()

    # the stored order is user (block 0), Act with one call (block 1), final reply (block 2)
    act, reh, real = (page.locator(f".st-key-{k}-1-0") for k in ("act", "rehearse", "real"))
    real.get_by_text('"status": "shipped"').first.wait_for()
    assert "Looking it up <b>bold</b> <tool_call>" in act.inner_text()
    assert '"id": "<script>alert(1)</script>"' in act.inner_text()
    assert "<execution_result>" in reh.inner_text() and '"status": "ok"' in reh.inner_text()
    assert '-  "status": "ok"' in real.inner_text() and '+  "status": "shipped"' in real.inner_text()
    boxes = [loc.bounding_box() for loc in (act, reh, real)]
    assert boxes[0]["x"] + boxes[0]["width"] <= boxes[1]["x"] + 1  # left to right, no overlap
    assert boxes[1]["x"] + boxes[1]["width"] <= boxes[2]["x"] + 1
    assert abs(boxes[0]["y"] - boxes[1]["y"]) < 5 and abs(boxes[1]["y"] - boxes[2]["y"]) < 5  # one row

    user = page.locator(".st-key-user-0")
    assert f"{dc.HTML} please check {dc.XSS} {dc.IMG}" in user.inner_text()
    final = page.locator(".st-key-act-2-0")
    assert f"Done {dc.HTML} {dc.XSS} {dc.IMG}" in final.inner_text()
    # nothing in the page was built from the markup: no <b>bold</b>, no injected script or image
    assert page.locator("b", has_text="bold").count() == 0
    assert page.locator("script", has_text="alert(1)").count() == 0
    assert page.locator("img[src='x']").count() == 0
    assert page.evaluate("() => window.__xss") is None
    assert dialogs == []

    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / "dashboard_trajectory.png"
    page.screenshot(path=str(shot))
    assert shot.stat().st_size > 10_000
    page.close()
