"""The Worldbench dashboard page through Streamlit's AppTest, on a store seeded with hand-made scores:
its table lists the run's transitions, the source / tool / leaf-F1 filters narrow it, and the chosen
transition's predicted and real values are shown side by side (as text, never as HTML)."""

from __future__ import annotations

import json

import pytest
from streamlit.testing.v1 import AppTest

from envace.dashboard_launch import app_path
from envace.store.session import upgrade
from envace.store.worldbench_rows import put_worldbench_scores

pytestmark = pytest.mark.dashboard
XSS = "<script>alert(1)</script>"


def _score(i, source, tool, f1, predicted, real):
    return {"id": f"{source}/d/t/{i}/gold", "source": source, "domain": "d", "tool": tool, "kind": "gold",
            "json_valid": predicted is not None, "exact": predicted == real, "shape": f1 > 0, "leaf_f1": f1,
            "real_error": False, "pred_error": False, "predicted_text": json.dumps(predicted), "predicted": predicted,
            "real": real, "call": {"name": tool, "arguments": {"i": i}}, "note": ""}


@pytest.fixture()
def store(tmp_path, monkeypatch):
    url = str(tmp_path / "store.db")
    upgrade(url)
    put_worldbench_scores(url, "copy_last", [
        _score(0, "tau2", "get_user", 1.0, {"u": 1}, {"u": 1}),
        _score(1, "tau2", "get_order", 0.5, {"o": 1, "p": XSS}, {"o": 1, "p": 2}),
        _score(2, "bfcl", "cd", 0.0, {"cwd": "a"}, {"cwd": "b"})], config={"k": 1})
    monkeypatch.setenv("ENVACE_DASHBOARD_STORE", url)
    monkeypatch.setenv("ENVACE_DASHBOARD_MLFLOW_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    return url


def _page() -> AppTest:
    at = AppTest.from_file(str(app_path()), default_timeout=120).run()
    at.switch_page("views/worldbench.py").run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_table_filters_and_side_by_side(store):
    at = _page()
    assert at.title[0].value == "Worldbench"
    table = at.dataframe[0].value
    assert list(table["transition"]) == ["tau2/d/t/0/gold", "tau2/d/t/1/gold", "bfcl/d/t/2/gold"]
    at.selectbox(key="wb_source").set_value("tau2").run()
    assert list(at.dataframe[0].value["tool"]) == ["get_user", "get_order"]
    at.selectbox(key="wb_tool").set_value("get_order").run()
    assert list(at.dataframe[0].value["leaf_f1"]) == [0.5]
    codes = [c.value for c in at.code]
    assert json.loads(codes[0]) == {"o": 1, "p": XSS} and json.loads(codes[1]) == {"o": 1, "p": 2}
    assert not at.markdown or all(XSS not in m.value for m in at.markdown)
    at.selectbox(key="wb_tool").set_value("(any)").run()
    at.selectbox(key="wb_source").set_value("(any)").run()
    at.slider(key="wb_f1").set_value((0.0, 0.4)).run()
    assert list(at.dataframe[0].value["transition"]) == ["bfcl/d/t/2/gold"]


def test_empty_store_says_how_to_fill_it(tmp_path, monkeypatch):
    url = str(tmp_path / "empty.db")
    upgrade(url)
    monkeypatch.setenv("ENVACE_DASHBOARD_STORE", url)
    monkeypatch.setenv("ENVACE_DASHBOARD_MLFLOW_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    at = _page()
    assert "envace worldbench score" in at.info[0].value
