"""Display shaping on hand-worked inputs: config diffs, run method, sweep / TTS / benchmark tables."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from envace.config import flatten
from envace_dashboard.tables import (
    ABSENT,
    METRIC_GROUPS,
    benchmark_details,
    benchmark_table,
    config_diff,
    final_metrics,
    group_keys,
    key_params,
    label_column,
    paired_frame,
    paired_metrics,
    read_csv,
    run_method,
    sweep_table,
    tts_frame,
    tts_lines,
)


def test_flatten_and_config_diff():
    a = {"lr": 1e-4, "rollout": {"mode": "rehearse", "act": {"t": 1.0}}, "tags": {}, "name": "x"}
    b = {"lr": 1e-4, "rollout": {"mode": "env", "act": {"t": 1.0}}, "extra": [1, 2]}
    assert flatten(a) == {"lr": 1e-4, "rollout.mode": "rehearse", "rollout.act.t": 1.0, "tags": {}, "name": "x"}
    d = config_diff(a, b).set_index("key")
    assert list(d.index) == ["extra", "lr", "name", "rollout.act.t", "rollout.mode", "tags"]
    assert d.loc["rollout.mode", "a"] == '"rehearse"' and d.loc["rollout.mode", "b"] == '"env"'
    assert d.loc["extra", "a"] == ABSENT and d.loc["extra", "b"] == "[1, 2]"
    assert d.loc["tags", "a"] == "{}" and d.loc["tags", "b"] == ABSENT
    assert set(d.index[d["differs"]]) == {"extra", "name", "rollout.mode", "tags"}
    assert config_diff(None, None).empty


def test_diff_tells_a_string_from_a_number():
    d = config_diff({"seed": 1}, {"seed": "1"}).set_index("key")
    assert bool(d.loc["seed", "differs"]) and (d.loc["seed", "a"], d.loc["seed", "b"]) == ("1", '"1"')


def test_run_method_key_params_final_metrics():
    cfg = {"rollout": {"mode": "env"}, "policy": "per_role", "optim": {"lr": 3e-4}, "k": 4, "other": 1}
    assert run_method(cfg) == "env / per_role"
    assert run_method(None, {"envace.mode": "rehearse", "envace.policy": "shared"}) == "rehearse / shared"
    assert run_method({}, {}) == ""
    assert key_params(cfg) == {"k": 4, "optim.lr": 3e-4}
    assert final_metrics({"reward/mean": 0.5, "junk": 1.0}) == {"reward/mean": 0.5}


def test_metric_groups_select_per_role_keys():
    keys = {"reward/mean", "act/adv_mean", "rehearse/adv_mean", "act/adv_std", "act/kl", "rehearse/clip_frac",
            "rehearse/parse_error_rate", "eval/fidelity/all/field_f1", "fidelity/get/field_f1"}
    assert group_keys(keys, METRIC_GROUPS["Advantage (mean)"]) == ["act/adv_mean", "rehearse/adv_mean"]
    assert group_keys(keys, METRIC_GROUPS["Rehearsal fidelity (field F1, exact match)"]) == \
        ["eval/fidelity/all/field_f1"]


def test_sweep_table_mean_ci_columns():
    df = read_csv("cell,method,seeds,mean,ci95\nenvace,rehearse,3,0.5123,0.04\ngrpo,env,3,0.47,\n", "x.csv")
    t = sweep_table(df)
    assert list(t["mean ± 95% CI"]) == ["0.512 ± 0.040", "0.470"]


def test_sweep_table_per_metric_pairs_are_melted():
    df = pd.DataFrame({"cell": ["a", "b"], "reward_mean": [0.5, 0.25], "reward_ci95": [0.1, 0.05],
                       "success mean": [1.0, 0.0]})
    t = sweep_table(df, digits=2)
    assert list(zip(t["cell"], t["metric"], t["mean ± 95% CI"])) == [
        ("a", "reward", "0.50 ± 0.10"), ("b", "reward", "0.25 ± 0.05"), ("a", "success", "1.00"),
        ("b", "success", "0.00")]


def test_sweep_table_without_means_names_the_columns():
    with pytest.raises(ValueError, match=r"no 'mean' column.*\['cell', 'score'\]"):
        sweep_table(pd.DataFrame({"cell": ["a"], "score": [1.0]}))
    with pytest.raises(ValueError, match="not a readable CSV"):
        read_csv('a,b\n"unterminated', "sweep/results.csv")


def test_tts_frame():
    df = pd.DataFrame({"n": [2, 1, 1], "Mode": ["parallel", "parallel", "sequential"], "Score": [0.5, 0.4, 0.4]})
    t = tts_frame(df)
    assert t.to_dict("list") == {"N": [1, 2, 1], "mode": ["parallel", "parallel", "sequential"],
                                 "score": [0.4, 0.5, 0.4]}
    with pytest.raises(ValueError, match=r"lacks column\(s\) \['mode'\]"):
        tts_frame(pd.DataFrame({"N": [1], "score": [0.1]}))


def test_tts_frame_of_the_flow_long_table_never_takes_the_seed_count_for_n():
    df = pd.DataFrame({"tts.n": [0, 2, 2], "tts.mode": ["parallel", "parallel", "sequential"], "group": list("abc"),
                       "metric": ["reward"] * 3, "n": [3, 3, 3], "mean": [0.4, 0.5, 0.6], "ci95": [0.1, None, 0.2]})
    t = tts_frame(df)
    assert t[["N", "mode", "score", "metric"]].values.tolist() == [
        [0, "parallel", 0.4, "reward"], [2, "parallel", 0.5, "reward"], [2, "sequential", 0.6, "reward"]]
    with pytest.raises(ValueError, match=r"\['N'\]"):  # `n` beside `mean` is a seed count
        tts_frame(df.drop(columns=["tts.n"]))
    lines = tts_lines(t)
    assert list(lines) == ["parallel", "sequential"]
    assert [p[:2] for p in lines["parallel"]] == [(0, 0.4), (2, 0.5)]
    assert [p[:2] for p in lines["sequential"]] == [(0, 0.4), (2, 0.6)]  # the one N = 0 run starts both lines
    assert lines["sequential"][1][2] == 0.2 and math.isnan(lines["parallel"][1][2])


def test_tts_lines_do_not_invent_a_baseline_when_n0_is_ambiguous():
    t = pd.DataFrame({"N": [0, 0, 2], "mode": ["a", "b", "c"], "score": [0.1, 0.2, 0.3]})
    assert tts_lines(t) == {"a": [(0, 0.1, pytest.approx(float("nan"), nan_ok=True))],
                            "b": [(0, 0.2, pytest.approx(float("nan"), nan_ok=True))],
                            "c": [(2, 0.3, pytest.approx(float("nan"), nan_ok=True))]}


def test_sweep_table_shows_the_flow_display_and_labels_by_group():
    df = pd.DataFrame({"rollout.mode": ["rehearse"], "group": ["envace"], "metric": ["reward"], "n": [1],
                       "mean": [0.5], "std": [None], "ci95": [None], "display": ["0.500 (n=1)"]})
    t = sweep_table(df)
    assert t["mean ± 95% CI"].tolist() == ["0.500 (n=1)"] and label_column(t) == "group"
    assert label_column(pd.DataFrame({"x": [1], "cell": ["c"]})) == "cell"


def test_benchmark_tables():
    paper = {"P (paper)": {"bfcl": 46.04, "tau2": 36.7, "vita": 16.0, "overall": 32.91}}
    report = {"ours": {"bfcl": 30.0, "tau2": 20.0, "vita": None, "overall": None}, "paper": paper,
              "benchmarks": {"bfcl": {"overall": 0.3, "k": 2, "limit": 5, "departures": ["a", "b"],
                                      "models": {"policy": "p", "user_simulator": None, "judge": "j"}}}}
    t = benchmark_table(report, "ours")
    assert t["model"].tolist() == ["P (paper)", "ours"]
    assert t.iloc[0, 1:].tolist() == [46.04, 36.7, 16.0, 32.91]
    assert t.iloc[1]["BFCL-v4"] == 30.0 and pd.isna(t.iloc[1]["Overall"])
    alone = benchmark_table({k: v for k, v in report.items() if k != "paper"}, "ours")  # a report without them
    assert alone["model"].tolist() == ["ours"] and alone.iloc[0]["τ²-Bench"] == 20.0
    d = benchmark_details(report).iloc[0]
    assert math.isclose(d["score (%)"], 30.0) and d["judge"] == "j" and d["departures"] == 2


def test_tts_lines_of_a_base_vs_trained_sweep_start_from_each_models_plain_run():
    df = pd.DataFrame({"model": ["runs/sft/model"] * 3 + ["runs/rl/final"] * 3, "tts.n": [0, 1, 1] * 2,
                       "tts.mode": ["parallel", "parallel", "sequential"] * 2, "metric": ["s"] * 6,
                       "mean": [0.1, 0.2, 0.3, 0.5, 0.6, 0.7], "ci95": [0.0] * 6})
    lines = tts_lines(tts_frame(df))
    assert {m: [p[:2] for p in ps] for m, ps in lines.items()} == {
        "final · parallel": [(0, 0.5), (1, 0.6)], "final · sequential": [(0, 0.5), (1, 0.7)],
        "model · parallel": [(0, 0.1), (1, 0.2)], "model · sequential": [(0, 0.1), (1, 0.3)]}


def test_paired_frame_shows_one_metric_as_text():
    row = {"comparison": "a − b", "kind": "vs base", "pass": "default", "arm": "a", "comparator": "b", "starts": "0",
           "seeds": "0,1,2", "n": 3, "tasks": 100, "samples": 1}
    for m, d in (("success", 0.05), ("reward", 0.02)):
        row.update({f"{m}_diff": d, f"{m}_task_lo": 0.01, f"{m}_task_hi": 0.09, f"{m}_seed_t_lo": -0.1,
                    f"{m}_seed_t_hi": 0.2, f"{m}_seed_boot_lo": -0.02, f"{m}_seed_boot_hi": 0.12,
                    f"{m}_k_improved": 2, f"{m}_p": 0.31234, f"{m}_p_holm": 0.6, f"{m}_iqm_a": 0.5, f"{m}_iqm_b": 0.45,
                    f"{m}_poi": 0.6667, f"{m}_verdict": "no difference detected, |Δ| < 0.201"})
    missing = dict(row, comparison="a − c", n=0, tasks=float("nan"), success_diff=float("nan"),
                   success_seed_t_lo=float("nan"), success_k_improved=float("nan"),
                   success_verdict="not computed: no finished cell of c kept per-episode outcomes")
    df = pd.DataFrame([row, missing])
    assert paired_metrics(df) == ["success", "reward"]
    shown = paired_frame(df, "success")
    assert shown.iloc[0].to_dict() == {
        "comparison": "a − b", "kind": "vs base", "pass": "default", "starts": "0", "seeds": "0,1,2", "tasks": "100",
        "Δ": "+0.050", "task-only 95%": "[+0.010, +0.090]", "seed-t 95%": "[-0.100, +0.200]",
        "seed-boot 95%": "[-0.020, +0.120]", "improved": "2/3", "p": "0.312", "p (Holm)": "0.6",
        "IQM A / B": "0.500 / 0.450", "P(A > B)": "0.67", "verdict": "no difference detected, |Δ| < 0.201"}
    gone = shown.iloc[1]
    assert (gone["Δ"], gone["seed-t 95%"], gone["improved"], gone["tasks"]) == ("—", "—", "—/0", "—")
    old = pd.DataFrame([{"comparison": "a − b", "kind": "vs base", "seeds": "0,1", "success_diff": 0.1,
                         "success_lo": 0.0, "success_hi": 0.2}])
    with pytest.raises(ValueError, match=r"lacks column\(s\) \['pass'"):
        paired_frame(old, "success")
