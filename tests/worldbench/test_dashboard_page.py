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


def test_behaviour_metrics_from_mlflow(store, tmp_path, monkeypatch):
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(uri)
    exp = client.create_experiment("envace")
    other = client.create_run(exp, tags={"envace.kind": "train"})  # not a worldbench run: not listed
    client.log_metric(other.info.run_id, "m/all/behr_delta", 9.0)
    run = client.create_run(exp, tags={"envace.kind": "worldbench"}, run_name="wb")
    for key, value in {"model_x/all/behr_delta": 0.25, "model_x/all/behr_delta_lo": 0.1,
                       "model_x/all/behr_delta_hi": 0.4, "model_x/all/behr_delta_seed_lo": 0.2,
                       "model_x/all/behr_delta_seed_hi": 0.3, "model_x/all/behr_delta_n": 12,
                       "act_policy/world/env_nll": 3.5, "model_x/world/wm2real_end_state_agree": 1.0,
                       "copy_last/all/rubric_format": 0.5, "copy_last/all/exact": 0.2}.items():
        client.log_metric(run.info.run_id, key, value)
    monkeypatch.setenv("ENVACE_DASHBOARD_MLFLOW_URI", uri)
    at = _page()
    assert at.subheader[0].value == "Behaviour metrics"
    table = at.dataframe[0].value
    assert list(zip(table["row"], table["group"], table["metric"])) == [
        ("act_policy", "world", "env_nll"), ("copy_last", "all", "rubric_format"), ("model_x", "all", "behr_delta"),
        ("model_x", "world", "wm2real_end_state_agree")]  # not `exact`: the per-transition scores are below
    first = table[table["metric"] == "behr_delta"].iloc[0]
    assert (first["value"], first["lo"], first["hi"], first["seed_lo"], first["seed_hi"], first["n"]) == \
        (0.25, 0.1, 0.4, 0.2, 0.3, 12.0)
    assert list(at.dataframe[1].value["transition"])[0] == "tau2/d/t/0/gold"  # the store's table still follows
