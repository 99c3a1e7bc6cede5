"""Every page through Streamlit's AppTest, on the seeded store and MLflow (conftest.py). Expected values
come from the seeding inputs (the synthetic trajectories, the logged metrics, the hand-written tables),
never from the dashboard's own helpers."""

from __future__ import annotations

import html
import json

import pytest
from streamlit.testing.v1 import AppTest

from envace.config import flatten
from envace.dashboard_launch import app_path
from envace.types import TerminationReason

pytestmark = pytest.mark.dashboard
TIMEOUT = 120  # seconds per script run (first MLflow import on a loaded 2-core machine)


def open_page(page: str | None = None) -> AppTest:
    at = AppTest.from_file(str(app_path()), default_timeout=TIMEOUT).run()
    if page is not None:
        at.switch_page(f"views/{page}.py").run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def frame(at: AppTest, column: str):
    """The first dataframe having `column`."""
    for d in at.dataframe:
        if column in d.value.columns:
            return d.value
    raise AssertionError(f"no dataframe with column {column!r}; have {[list(d.value.columns) for d in at.dataframe]}")


def charts(at: AppTest) -> list[dict]:
    return [json.loads(e.proto.spec) for e in at.get("plotly_chart")]


def chart(at: AppTest, title_part: str) -> dict:
    for c in charts(at):
        title = c["layout"].get("title", {})
        if title_part in (title.get("text", "") if isinstance(title, dict) else str(title)):
            return c
    raise AssertionError(f"no chart titled {title_part!r}")


def rerun(at: AppTest) -> AppTest:
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


# ----- Runs ---------------------------------------------------------------------------------------------

def test_runs_page_lists_runs_with_method_params_and_final_metrics(dc, dash_env):
    at = open_page()
    assert at.title[0].value == "Runs"
    runs = frame(at, "run").set_index("run")
    assert set(runs.index) == {"run-a", "run-b"}
    assert runs.loc["run-a", "method"] == "rehearse / shared" and runs.loc["run-b", "method"] == "env / shared"
    assert runs.loc["run-a", "reward/mean"] == pytest.approx(dc.metric_a(3)["reward/mean"])
    assert runs.loc["run-b", "reward/mean"] == pytest.approx(dc.metric_b(3)["reward/mean"])
    assert runs.loc["run-a", "optim.lr"] == 1e-4 and runs.loc["run-b", "optim.lr"] == 3e-4
    assert runs.loc["run-a", "status"] == "finished"
    others = frame(at, "experiment")
    assert set(others["name"]) == {"paper-ablations", "eval-tiny"}


def test_runs_page_opens_a_run_and_diffs_two_configs(dc, dash_env):
    at = open_page()
    at.selectbox(key="open_run").set_value("run-a")
    rerun(at)
    by_mode = frame(at, "scored")
    expected = {}
    for r in dash_env.rows:
        if r[0] == "run-a":
            expected[(r[2], r[3])] = expected.get((r[2], r[3]), 0) + 1
    assert dict(zip(zip(by_mode["mode"], by_mode["split"]), by_mode["trajectories"])) == expected
    at.selectbox(key="cmp_a").set_value("run-a")
    at.selectbox(key="cmp_b").set_value("run-b")
    rerun(at)
    diff = frame(at, "differs")
    assert set(diff["key"]) == dc.DIFFERING_KEYS and diff["differs"].all()
    row = diff.set_index("key").loc["rollout.mode"]
    assert (row["A: run-a"], row["B: run-b"]) == ('"rehearse"', '"env"')
    styled = [d for d in at.dataframe if "differs" in d.value.columns][0]
    assert "background-color" in str(styled.proto.arrow_data.styler.styles)  # highlighted
    at.toggle(key="only_diff").set_value(False)
    rerun(at)
    assert len(frame(at, "differs")) == len(flatten(dc.CONFIG_A))  # both configs have the same 12 leaves


# ----- Trajectories -------------------------------------------------------------------------------------

def _table(at):
    return frame(at, "generations")


def _traj_page(run: str = "run-a") -> AppTest:
    at = open_page("trajectories")
    at.selectbox(key="run").set_value(run)
    return rerun(at)


def test_trajectory_filters_match_an_independent_scan(dash_env):
    at = _traj_page()
    ours = [r for r in dash_env.rows if r[0] == "run-a"]
    assert len(_table(at)) == len(ours)  # one page of 50 holds the whole small run
    at.number_input(key="reward_min").set_value(0.3)
    at.number_input(key="reward_max").set_value(0.6)
    at.selectbox(key="sort").set_value("reward ↑")
    rerun(at)
    want = sorted((r[6], r[1], r[4], r[5]) for r in ours if r[6] is not None and 0.3 <= r[6] <= 0.6)
    got = _table(at)
    assert list(zip(got["reward"], got["step"], got["prompt"], got["sample"])) == want
    at.number_input(key="reward_min").set_value(None)
    at.number_input(key="reward_max").set_value(None)
    at.number_input(key="smin-run-a").set_value(1)
    at.number_input(key="smax-run-a").set_value(2)
    term = TerminationReason.FINAL_REPLY
    at.selectbox(key="termination").set_value(term.value)
    rerun(at)
    want = sorted((r[1], r[4], r[5]) for r in ours if 1 <= r[1] <= 2 and r[7] is term)
    got = _table(at) if want else None
    assert (sorted(zip(got["step"], got["prompt"], got["sample"])) if want else []) == want
    at.selectbox(key="termination").set_value("(any)")
    at.selectbox(key="mode").set_value("eval")
    rerun(at)
    assert sorted(_table(at)["prompt"]) == sorted(r[4] for r in ours if 1 <= r[1] <= 2 and r[2] == "eval")


def test_text_role_and_empty_filters(dash_env):
    at = _traj_page()
    at.text_input(key="text").input("ALERT(1)")  # case-insensitive
    rerun(at)
    assert _table(at)["prompt"].tolist() == ["task-hostile"]
    at.text_input(key="text").input("")
    at.selectbox(key="role").set_value("env")  # no stored trajectory has an ENV turn
    rerun(at)
    assert "No trajectory matches" in at.info[0].value
    assert not [d for d in at.dataframe if "generations" in d.value.columns]


def test_pages_of_the_trajectory_list_partition_the_run(dash_env):
    at = _traj_page()
    at.selectbox(key="page_size").set_value(25)
    rerun(at)
    first = _table(at)["id"].tolist()
    [page] = [n for n in at.number_input if n.label == "Page"]
    page.set_value(2)
    rerun(at)
    second = _table(at)["id"].tolist()
    n = sum(1 for r in dash_env.rows if r[0] == "run-a")
    assert len(first) == 25 and len(second) == n - 25 and not set(first) & set(second)
    assert "page 2 of 2" in " ".join(c.value for c in at.caption)


def test_trajectory_view_shows_act_rehearse_real_and_breakdowns_as_text(dc, dash_env):
    at = _traj_page()
    at.number_input(key="open_id").set_value(dash_env.hostile_id)
    rerun(at)
    codes = [c.value for c in at.code]
    act = next(c for c in codes if c.startswith("Looking it up"))
    assert dc.HTML in act and "<tool_call>" in act
    call = json.loads(next(c for c in codes if c.startswith("{") and '"arguments"' in c))
    assert call == {"name": "get_order", "arguments": {"id": dc.XSS}}
    assert any(c.startswith("<execution_result>") and '"status": "ok"' in c for c in codes)
    real = json.loads(next(c for c in codes if '"shipped"' in c and not c.startswith("---")))
    assert real == {"id": dc.XSS, "status": "shipped", "note": dc.HTML}
    diff = next(c for c in codes if c.startswith("--- rehearsed"))
    assert diff == ("--- rehearsed\n+++ real\n@@ -1,5 +1,5 @@\n {\n"
                    f'   "id": "{dc.XSS}",\n   "note": "{dc.HTML}",\n-  "status": "ok"\n+  "status": "shipped"\n }}')
    assert f"Done {dc.HTML} {dc.XSS} {dc.IMG}" in codes
    assert f"{dc.HTML} please check {dc.XSS} {dc.IMG}" in [t.value for t in at.text]
    rows = frame(at, "trainable")
    assert rows["role"].tolist() == ["user", "act", "rehearse", "act"]
    assert rows["tokens"].tolist() == [0, 3, 2, 2]
    assert rows["advantage"].tolist()[1:] == [0.25, -0.5, 0.25]
    items = frame(at, "question")
    assert items["question"].tolist() == [f"{dc.HTML} handled?"] and items["passed"].tolist() == [True]
    assert [m.value for m in at.metric if m.label == "Reward"][0] == "0.750"
    # untrusted text never reaches an element that renders markdown
    rendered = [e.value for kind in ("markdown", "caption", "error", "success", "warning", "info", "subheader")
                for e in getattr(at, kind)]
    for s in rendered:
        assert dc.XSS not in s and dc.HTML not in s and "onerror" not in s, s


def test_deep_link_opens_run_and_trajectory(dash_env):
    at = AppTest.from_file(str(app_path()), default_timeout=TIMEOUT)
    at.query_params["run"] = "run-a"
    at.query_params["traj"] = str(dash_env.hostile_id)
    at.run()
    at.switch_page("views/trajectories.py").run()
    assert not at.exception
    assert at.selectbox(key="run").value == "run-a"
    assert at.number_input(key="open_id").value == dash_env.hostile_id
    assert at.subheader[0].value == f"Trajectory #{dash_env.hostile_id}"


# ----- Learning curves ----------------------------------------------------------------------------------

def test_learning_curves_overlay_runs_per_role(dc, dash_env):
    at = open_page("curves")
    reward = chart(at, "Reward")
    lines = {html.unescape(t["name"]): (t["x"], t["y"]) for t in reward["data"]}
    assert set(lines) == {"name-run-a · reward/mean", "name-run-b · reward/mean"}
    assert lines["name-run-a · reward/mean"][0] == [0, 1, 2, 3]
    assert lines["name-run-a · reward/mean"][1] == pytest.approx([dc.metric_a(s)["reward/mean"] for s in range(4)])
    adv = {html.unescape(t["name"]) for t in chart(at, "Advantage")["data"]}
    assert adv == {"name-run-a · act/adv_mean", "name-run-a · rehearse/adv_mean", "name-run-b · act/adv_mean"}
    kl = chart(at, "KL")
    assert {html.unescape(t["name"]) for t in kl["data"]} == {"name-run-a · act/kl", "name-run-a · rehearse/kl"}
    per = chart(at, "parse-error")["data"]
    assert len(per) == 1
    assert per[0]["y"] == pytest.approx([dc.metric_a(s)["rehearse/parse_error_rate"] for s in range(4)])
    fid = chart(at, "fidelity")["data"]
    assert [html.unescape(t["name"]) for t in fid] == ["name-run-a · fidelity/all/field_f1"]
    assert len(chart(at, "Clip fraction")["data"]) == 3
    at.multiselect(key="curve_runs").set_value([dash_env.mlflow_ids["run-b"]])
    rerun(at)
    assert [html.unescape(t["name"]) for t in chart(at, "Reward")["data"]] == ["name-run-b · reward/mean"]
    assert any("KL to the reference: not logged" in c.value for c in at.caption)


# ----- Sweeps -------------------------------------------------------------------------------------------

def test_sweeps_page_shows_ablation_table_and_tts_chart(dc, dash_env):
    at = open_page("sweeps")
    table = frame(at, "mean ± 95% CI")
    assert table["group"].tolist() == list(dc.SWEEP_EXPECTED)
    assert table["mean ± 95% CI"].tolist() == [e[2] for e in dc.SWEEP_EXPECTED.values()]
    bars = chart(at, "mean ± 95% CI")["data"][0]
    assert bars["x"] == list(dc.SWEEP_EXPECTED)
    assert bars["y"] == pytest.approx([e[0] for e in dc.SWEEP_EXPECTED.values()], abs=1e-6)
    assert bars["error_y"]["array"] == pytest.approx([e[1] for e in dc.SWEEP_EXPECTED.values()], abs=1e-6)
    curves = {t["name"]: (t["x"], t["y"], t["error_y"]["array"]) for t in chart(at, "mean over seeds")["data"]}
    assert set(curves) == set(dc.CURVE_EXPECTED)
    for group, (steps, means, halves) in dc.CURVE_EXPECTED.items():
        assert curves[group][0] == steps
        assert curves[group][1] == pytest.approx(means) and curves[group][2] == pytest.approx(halves)
    paired = frame(at, "seed-t 95%")
    assert len(paired) == 1 and paired.iloc[0]["pass"] == "default"
    assert {k: paired.iloc[0][k] for k in dc.PAIRED_EXPECTED} == dc.PAIRED_EXPECTED
    assert any("Unit of inference" in c.value and "Holm over the m = 1" in c.value for c in at.caption)
    tts = chart(at, "score vs N")["data"]
    got = {t["name"]: list(zip(t["x"], t["y"])) for t in tts}
    base = dc.TTS_CELLS[(0, "parallel")]  # N = 0 (the plain run) is shared: it starts both lines
    assert got == {"parallel": [(0, base), (2, 0.45), (3, 0.47)], "sequential": [(0, base), (2, 0.48), (3, 0.50)]}


def test_sweeps_and_benchmarks_empty_states(monkeypatch, seeded, empty_mlflow):
    monkeypatch.setenv("ENVACE_DASHBOARD_STORE", seeded.store)
    monkeypatch.setenv("ENVACE_DASHBOARD_MLFLOW_URI", empty_mlflow)
    at = open_page("sweeps")
    infos = " ".join(i.value for i in at.info)
    assert "No sweeps yet" in infos and "No TTS sweeps yet" in infos and not charts(at)
    assert "No paired comparisons yet" in infos
    at = open_page("benchmarks")
    assert "No benchmark reports yet" in at.info[0].value


def test_pages_without_mlflow_say_so(monkeypatch, seeded, tmp_path):
    monkeypatch.setenv("ENVACE_DASHBOARD_STORE", seeded.store)
    monkeypatch.setenv("ENVACE_DASHBOARD_MLFLOW_URI", f"sqlite:///{tmp_path / 'absent' / 'mlflow.db'}")
    for page in ("curves", "sweeps", "benchmarks"):
        at = open_page(page)
        assert "does not exist" in at.info[0].value
    assert not (tmp_path / "absent").exists()
    at = open_page()
    assert set(frame(at, "run")["run"]) == {"run-a", "run-b"}  # the store still shows


def test_missing_store_is_reported(monkeypatch, tmp_path):
    monkeypatch.setenv("ENVACE_DASHBOARD_STORE", str(tmp_path / "nope.db"))
    at = open_page()
    assert "does not exist" in at.error[0].value and not (tmp_path / "nope.db").exists()


# ----- Benchmarks ---------------------------------------------------------------------------------------

def test_benchmarks_page_beside_the_paper(dc, dash_env):
    at = open_page("benchmarks")
    t = frame(at, "Overall").set_index("model")
    assert t.loc["EnvACE-8B (paper)"].tolist() == [46.04, 36.7, 16.0, 32.91]
    assert t.loc["Qwen3-8B (paper)"].tolist() == [44.04, 30.0, 11.4, 28.48]
    ours = t.loc["ours: eval-tiny"].tolist()
    assert ours == pytest.approx([30.0, 20.0, 10.0, (30.0 + 20.0 + 10.0) / 3])
    d = frame(at, "user simulator").set_index("benchmark")
    assert set(d.index) == {"bfcl", "tau2", "vita"}
    assert set(d["user simulator"]) == {"sim-model"} and set(d["judge"]) == {"judge-model"}
    assert d.loc["tau2", "score (%)"] == pytest.approx(20.0)
    assert f"bfcl: tiny model {dc.HTML}" in " ".join(t.value for t in at.text)  # departures, as text
