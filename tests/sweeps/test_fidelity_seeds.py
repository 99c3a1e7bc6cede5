"""Seed-level fidelity readings of a world-model sweep (envace.sweeps.fidelity_seeds) on hand-built cell
records whose gains, intervals and pair orders are worked out by hand."""

import math

import pytest

from envace.sweeps.fidelity_seeds import (
    arm_order,
    arm_pairs,
    fidelity_gains,
    fidelity_report,
    kendall_tau,
    write_fidelity,
)

LEAF, BEHR, SUCCESS = "worldbench/all/leaf_f1", "worldbench/all/behr_abs_delta", "eval/world/success"
T_975_DF2 = 4.302652729911275  # Student t quantile, 2 degrees of freedom


def _cell(group, kind, seed, leaf, behr, success=0.5, model="runs/sft/model"):
    return {"group": group, "kind": kind, "seed": seed, "start_model": model,
            "metrics": {LEAF: leaf, BEHR: behr, SUCCESS: success}}


@pytest.fixture
def records():
    # the base row varies by seed, so a cell must be paired with the base of its own seed
    base = [_cell("variant=base", "eval", s, leaf, 1.0) for s, leaf in enumerate([0.20, 0.25, 0.15])]
    a = [_cell("variant=a", "train", s, leaf, behr) for s, (leaf, behr) in
         enumerate([(0.30, 0.5), (0.36, 0.6), (0.24, 0.4)])]   # leaf +0.10/+0.11/+0.09; BehR -0.5/-0.4/-0.6
    b = [_cell("variant=b", "train", s, leaf, behr) for s, (leaf, behr) in
         enumerate([(0.20, 2.0), (0.26, 2.1), (0.14, 1.9)])]   # leaf 0/+0.01/-0.01; BehR +1.0/+1.1/+0.9
    c = [_cell("variant=c", "train", s, leaf, behr) for s, (leaf, behr) in
         enumerate([(0.40, 3.0), (0.46, 3.1), (0.34, 2.9)])]   # best leaf F1, worst BehR
    return base + a + b + c


def test_gain_is_the_seed_paired_difference_with_a_t_interval(records):
    g = fidelity_gains(records).set_index(["arm", "metric"])
    row = g.loc[("variant=a", LEAF)]
    hw = T_975_DF2 * 0.01 / math.sqrt(3)  # the gains 0.10, 0.11, 0.09: sd 0.01
    assert row["diff"] == pytest.approx(0.10)
    assert (row["lo"], row["hi"]) == pytest.approx((0.10 - hw, 0.10 + hw))
    assert (row["better_seeds"], row["n"], row["base"]) == (3, 3, "variant=base")
    behr = g.loc[("variant=a", BEHR)]
    assert behr["diff"] == pytest.approx(-0.5) and behr["better_seeds"] == 3  # lower |Δ| is better
    assert g.loc[("variant=b", BEHR), "better_seeds"] == 0
    assert g.loc[("variant=b", LEAF), "better_seeds"] == 1
    assert g.loc[("variant=a", SUCCESS), "diff"] == 0.0


def test_pairs_are_ordered_in_each_metrics_own_direction(records):
    p = arm_pairs(records).set_index(["a", "b", "metric"])
    assert p.loc[("variant=a", "variant=c", LEAF), "better"] == "variant=c"
    assert p.loc[("variant=a", "variant=c", BEHR), "better"] == "variant=a"  # smaller BehR |Δ|
    assert p.loc[("variant=a", "variant=b", BEHR), "diff"] == pytest.approx(-1.5)
    assert p.loc[("variant=a", "variant=b", SUCCESS), "better"] == ""  # all equal at 0: not ordered


def test_behaviour_against_leaf_f1_counts_concordant_and_discordant_pairs(records):
    gains, pairs = fidelity_gains(records), arm_pairs(records)
    order = {o["metric"]: o for o in arm_order(gains, pairs)}
    behr = order[BEHR]
    # a vs b: both put a ahead; a vs c and b vs c: leaf F1 puts c ahead, BehR the other arm
    assert behr["concordant"] == 1
    assert behr["discordant"] == ["variant=a vs variant=c", "variant=b vs variant=c"]
    assert behr["kendall_tau"] == pytest.approx(-1 / 3)
    assert (order[SUCCESS]["ordered_by_string_only"], order[SUCCESS]["neither"]) == (3, 0)  # success ties


def test_kendall_tau_by_hand():
    assert kendall_tau([1, 2, 3], [1, 2, 3]) == 1.0
    assert kendall_tau([1, 2, 3], [3, 2, 1]) == -1.0
    assert kendall_tau([1, 2, 3], [1, 3, 2]) == pytest.approx(1 / 3)
    assert math.isnan(kendall_tau([1], [1]))


def test_an_arm_without_a_base_row_of_its_start_has_no_gain(records, tmp_path):
    d = [_cell("variant=d", "train", s, 0.9, 0.1, model="runs/other/model") for s in range(3)]
    gains, pairs = fidelity_gains(records + d), arm_pairs(records + d)
    assert not any(a.startswith("variant=d") for a in gains["arm"])
    assert not any(a.startswith("variant=d") for a in set(pairs["a"]) | set(pairs["b"]))  # no other arm there
    paths = write_fidelity(tmp_path, fidelity_report(records))
    text = paths["world_model_seeds.md"].read_text()
    assert "| variant=a | 3 |" in text and "variant=a vs variant=c" in text


def test_arms_of_several_starts_are_named_by_their_start(records):
    other = [{**r, "start_model": "runs/other/model"} for r in records]
    gains = fidelity_gains(records + other)
    assert set(gains["arm"]) == {f"variant={a} @ {m}" for a in "abc" for m in ("runs/sft/model", "runs/other/model")}
    assert set(gains.groupby("arm")["n"].max()) == {3}
    pairs = arm_pairs(records + other)
    assert all(a.split(" @ ")[1] == b.split(" @ ")[1] for a, b in zip(pairs["a"], pairs["b"]))
