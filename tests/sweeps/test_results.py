"""Mean ± 95 % CI (Student t over seeds) on hand-worked numbers, the long and wide tables, the plot."""

from __future__ import annotations

import math

import pytest

from envace.sweeps.results import markdown_table, results_figure, summarize, t_interval, wide_table

# t_{0.975, df} from a printed t table
T975 = {1: 12.7062, 2: 4.3027, 4: 2.7764}


def test_t_interval_three_seeds_by_hand():
    # mean 0.4; s = sqrt(((-.2)^2 + 0 + .2^2) / 2) = 0.2; se = 0.2 / sqrt(3) = 0.11547; half = 4.3027 * se
    s = t_interval([0.2, 0.4, 0.6])
    assert s["n"] == 3
    assert s["mean"] == pytest.approx(0.4)
    assert s["std"] == pytest.approx(0.2)
    assert s["ci95"] == pytest.approx(T975[2] * 0.2 / math.sqrt(3), rel=1e-4)
    assert s["ci95"] == pytest.approx(0.49683, abs=1e-4)
    assert (s["low"], s["high"]) == pytest.approx((0.4 - 0.49683, 0.4 + 0.49683), abs=1e-4)


def test_t_interval_five_values_by_hand():
    # 1..5: mean 3, s = sqrt(10 / 4) = 1.58114, se = 0.70711, half = 2.7764 * 0.70711 = 1.96324
    s = t_interval([1, 2, 3, 4, 5])
    assert s["mean"] == pytest.approx(3.0)
    assert s["std"] == pytest.approx(math.sqrt(2.5))
    assert s["ci95"] == pytest.approx(1.96324, abs=1e-4)


def test_t_interval_two_values_uses_df_1():
    # 0 and 1: s = 0.70711, se = 0.5, half = 12.7062 * 0.5 = 6.3531 (two seeds say almost nothing)
    assert t_interval([0.0, 1.0])["ci95"] == pytest.approx(T975[1] * 0.5, rel=1e-4)


def test_single_seed_has_no_interval_and_empty_is_nan():
    one = t_interval([0.7])
    assert one["n"] == 1 and one["mean"] == 0.7 and math.isnan(one["ci95"])
    none = t_interval([])
    assert none["n"] == 0 and math.isnan(none["mean"])
    assert t_interval([0.5, float("nan"), 0.5])["n"] == 2  # NaN (a metric that failed) is not a value


def _rec(group, seed, levels, **metrics):
    return {"cell": f"{group},seed={seed}", "group": group, "seed": seed, "levels": levels, "metrics": metrics}


def test_summarize_groups_over_seeds_in_first_seen_order():
    recs = [
        _rec("variant=envace", 0, {"variant": "envace"}, success=0.2, reward=1.0),
        _rec("variant=grpo", 0, {"variant": "grpo"}, success=0.1, reward=2.0),
        _rec("variant=envace", 1, {"variant": "envace"}, success=0.4, reward=3.0),
        _rec("variant=envace", 2, {"variant": "envace"}, success=0.6),  # reward missing for this seed
        _rec("variant=grpo", 1, {"variant": "grpo"}, success=0.3, reward=4.0),
    ]
    table = summarize(recs, ["variant"], ["success", "reward"])
    assert list(table["group"].unique()) == ["variant=envace", "variant=grpo"]
    env_s = table[(table.group == "variant=envace") & (table.metric == "success")].iloc[0]
    assert env_s["n"] == 3 and env_s["mean"] == pytest.approx(0.4) and env_s["ci95"] == pytest.approx(0.49683, abs=1e-4)
    assert env_s["variant"] == "envace"
    assert env_s["display"] == "0.400 ± 0.497"
    env_r = table[(table.group == "variant=envace") & (table.metric == "reward")].iloc[0]
    assert env_r["n"] == 2 and env_r["mean"] == pytest.approx(2.0)
    grpo_s = table[(table.group == "variant=grpo") & (table.metric == "success")].iloc[0]
    # 0.1, 0.3: mean 0.2, s = 0.141421, se = 0.1, half = 12.7062 * 0.1
    assert grpo_s["mean"] == pytest.approx(0.2) and grpo_s["ci95"] == pytest.approx(1.27062, abs=1e-4)


def test_wide_table_markdown_and_plot_carry_the_intervals():
    recs = [_rec("a", s, {"x": "a"}, m=v) for s, v in enumerate([0.2, 0.4, 0.6])] + [_rec("b", 0, {"x": "b"}, m=0.9)]
    table = summarize(recs, ["x"], ["m"])
    wide = wide_table(table)
    assert list(wide.index) == ["a", "b"]
    assert wide.loc["a", "m"] == "0.400 ± 0.497" and wide.loc["b", "m"] == "0.900 (n=1)"
    md = markdown_table(table)
    assert "| a | 0.400 ± 0.497 |" in md and "| b | 0.900 (n=1) |" in md
    fig = results_figure(table, "t")
    bar = fig.data[0]
    assert list(bar.x) == ["a", "b"]
    assert list(bar.y) == pytest.approx([0.4, 0.9])
    assert list(bar.error_y.array) == pytest.approx([0.49683, 0.0], abs=1e-4)  # undefined CI drawn as none
