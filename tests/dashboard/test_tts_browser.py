"""Test-time rehearsal in a real browser: `envace dashboard` (Debian's Chromium, headless, via playwright) on
a store holding one committed execution (mode tts-commit) with its N = 2 private rehearsals (tts-private)
written by the real `TrajectoryWriter` (`envace.store.tts.put_tts`). Opening the committed run shows the
memory m_x, both private rehearsals, and the executed call with its real response beside the two
imagined ones; opening a private rehearsal names its committed execution. Also the pure comparison
function on the stored records. Saves a screenshot under test-artifacts/.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from envace.store.query import TrajectoryFilter, get_trajectory, list_trajectories
from envace.store.session import read_only_session
from envace.store.tts import put_tts
from envace.store.tts_query import tts_commit, tts_rehearsals
from envace.store.writer import TrajectoryWriter
from envace.types import Message, Mode, Observation, Role, Task, TerminationReason, ToolCall, Trajectory, Turn

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
READY_S, UI_MS = 180, 120_000
MEMO = "Rehearsed: call get_stock for apple, then answer <b>briefly</b>."
REAL = {"item": "apple", "stock": 5}
IMAGINED = [{"item": "apple", "stock": 42}, {"item": "apple", "stock": 7}]
TOOLS = [{"type": "function", "function": {"name": "get_stock", "parameters": {
    "type": "object", "properties": {"item": {"type": "string"}}, "required": ["item"]}}}]


def _act(text: str, calls: list[ToolCall]) -> Turn:
    return Turn(Role.ACT, [], [1, 2], [-0.1, -0.1], text, 0.7, tool_calls=calls)


def tts_trajectories() -> Trajectory:
    """One committed execution (one real get_stock call) whose two private rehearsals imagined that call."""
    call = ToolCall("get_stock", {"item": "apple"})
    task = Task(uuid="tts-task", tools=TOOLS, messages=[Message("system", "You manage a shop."),
                                                         Message("user", "How many apples?")], domain="shop")
    view = Task(uuid="tts-task", tools=TOOLS, messages=list(task.messages), domain="shop")
    private = []
    for i, value in enumerate(IMAGINED):
        reh = Turn(Role.REHEARSE, [], [3], [-0.2], f"<execution_result>\n{json.dumps(value)}\n</execution_result>",
                   1.0, call=call, observation=Observation(value, source=Role.REHEARSE))
        t = Trajectory(task=view, prompt_index=0, sample_index=i, mode=Mode.REHEARSE,
                       turns=[_act("<tool_call>…</tool_call>", [call]), reh, _act(f"{value['stock']} apples.", [])],
                       termination=TerminationReason.FINAL_REPLY)
        t.tts = {"role": "private", "n": 2, "mode": "parallel", "attempt": 0, "index": i, "user_turn": 0,
                 "assessment": f"Achieved: no. Review {i + 1}: check the number.", "achieved": False,
                 "memory": MEMO, "seed": 100 + i}
        private.append(t)
    commit = Trajectory(task=task, prompt_index=0, sample_index=0, mode=Mode.ENV,
                        messages=[Message("system", "You manage a shop.\n\nRehearsal notes: " + MEMO),
                                  Message("user", "How many apples?"), Message("assistant", "", tool_calls=[call]),
                                  Message("tool", json.dumps(REAL), name="get_stock"),
                                  Message("assistant", "5 apples.")],
                        turns=[_act("<tool_call>…</tool_call>", [call]), _act("5 apples.", [])],
                        termination=TerminationReason.FINAL_REPLY, reward=1.0, env_calls=1)
    commit.tts = {"n": 2, "mode": "parallel", "attempt": 0, "seed": 7, "rehearse_at": "first", "memory": MEMO,
                  "phases": [{"user_turn": 0, "memory": MEMO}], "private": private}
    return commit


@pytest.fixture(scope="module")
def tts_store(tmp_path_factory):
    store = str(tmp_path_factory.mktemp("tts-dash") / "store.db")
    with TrajectoryWriter(store, "tts-run") as w:
        put_tts(w, [tts_trajectories()], step=0, split="test")
    with read_only_session(store) as s:
        (commit,) = list_trajectories(s, TrajectoryFilter(run_id="tts-run", mode="tts-commit")).items
        private = [t.id for t in list_trajectories(s, TrajectoryFilter(run_id="tts-run", mode="tts-private")).items]
    return store, commit.id, private


def test_store_query_and_comparison(tts_store):
    from envace_dashboard.tts_view import comparisons

    store, commit_id, private_ids = tts_store
    with read_only_session(store) as s:
        rec = tts_commit(s, commit_id)
        links = tts_rehearsals(s, commit_id)
        privates = [get_trajectory(s, link.trajectory_id) for link in links]
    assert (rec.n, rec.tts_mode, rec.memory) == (2, "parallel", MEMO)
    assert sorted(link.trajectory_id for link in links) == sorted(private_ids) and len(links) == 2
    (row,) = comparisons(rec, list(zip(links, privates)))
    assert (row.name, row.arguments, row.real) == ("get_stock", {"item": "apple"}, REAL)
    assert [im.value for im in row.imagined] == IMAGINED


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.dashboard
@pytest.mark.slow
def test_committed_run_with_its_private_rehearsals_in_the_browser(tts_store, tmp_path, wait_until_healthy):
    if not Path(CHROMIUM).is_file():
        pytest.skip(f"{CHROMIUM} not found: the browser tests need Debian's chromium package")
    sync_api = pytest.importorskip("playwright.sync_api")
    store, commit_id, private_ids = tts_store
    port = _free_port()
    log = tmp_path / "server.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "envace.cli", "dashboard", "--store", store,
                                 "--port", str(port)],
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_until_healthy(proc, port, log, READY_S)
        with sync_api.sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1700, "height": 2600})
            page.set_default_timeout(UI_MS)
            page.goto(f"http://127.0.0.1:{port}/trajectories?run=tts-run&traj={commit_id}",
                      wait_until="domcontentloaded")
            page.get_by_role("heading", name=f"Trajectory #{commit_id}").wait_for()
            page.get_by_role("heading", name="Test-time rehearsal").wait_for()
            memory = page.locator(".st-key-tts-memory")
            memory.get_by_text("Rehearsed: call get_stock").first.wait_for()
            assert MEMO in memory.inner_text() and page.locator("b", has_text="briefly").count() == 0
            page.get_by_text("N = 2 private rehearsals · parallel · attempt 0").wait_for()
            call, real, imagined = (page.locator(f".st-key-tts-{k}-0") for k in ("call", "real", "imagined"))
            imagined.get_by_text('"stock": 42').first.wait_for()
            assert '"name": "get_stock"' in call.inner_text()
            assert '"stock": 5' in real.inner_text()
            text = imagined.inner_text()
            assert '"stock": 42' in text and '"stock": 7' in text
            assert all(f"trajectory #{i}" in text for i in private_ids)
            boxes = [loc.bounding_box() for loc in (call, real, imagined)]
            assert boxes[0]["x"] + boxes[0]["width"] <= boxes[1]["x"] + 1  # side by side, left to right
            assert boxes[1]["x"] + boxes[1]["width"] <= boxes[2]["x"] + 1
            assert abs(boxes[0]["y"] - boxes[1]["y"]) < 5 and abs(boxes[1]["y"] - boxes[2]["y"]) < 5
            table = page.locator(".st-key-tts-rehearsals")
            table.get_by_text("Private rehearsals (2)").wait_for()
            ARTIFACTS.mkdir(exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / "dashboard_tts.png"), full_page=True)
            # a private rehearsal names its committed execution
            page.goto(f"http://127.0.0.1:{port}/trajectories?run=tts-run&traj={private_ids[0]}",
                      wait_until="domcontentloaded")
            link = page.locator(".st-key-tts-private-link")
            link.get_by_text(f"Its committed execution is trajectory #{commit_id}.").wait_for()
            browser.close()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
