"""The task-gain vs world-model-gain table of a sweep (envace.sweeps.world_model) on hand-built cell records:
the world-model gain is the per-transition mean over seeds, differenced and averaged (hand-computed here),
inside worldbench's percentile bootstrap; arms pair with the base row of their own start model only."""

from __future__ import annotations

import json

import numpy as np
import pytest

from envace.sweeps.world_model import (
    WorldbenchSpec,
    gain_tracking,
    markdown_tracking,
    spearman,
    world_model_dir,
    world_model_report,
    write_world_models,
)
from envace.worldbench.score import paired_gain

IDS = ["w1", "w2", "w3", "b1"]
SOURCES = ["world", "world", "world", "bfcl"]


def _record(tmp_path, group, kind, seed, model, leaf, exact, success=None):
    d = tmp_path / f"{group}-{seed}"
    d.mkdir()
    scores = d / "scores.jsonl"
    scores.write_text("".join(json.dumps({"id": i, "source": s, "leaf_f1": f, "exact": e}) + "\n"
                              for i, s, f, e in zip(IDS, SOURCES, leaf, exact)))
    (d / "worldbench.json").write_text(json.dumps({"rows": {"model:x": {"scores_file": str(scores)}}}))
    rec = {"group": group, "kind": kind, "seed": seed, "start_model": str(model),
           "worldbench_file": str(d / "worldbench.json")}
    if success is not None:
        (d / "eval.json").write_text(json.dumps({"world": {"temperature": 0.0, "per_task": {
            "task_ids": ["t1", "t2"], "seeds": [seed], "k": 1, "success": [[s] for s in success],
            "reward": [[s] for s in success]}}}))
        rec["eval_file"] = str(d / "eval.json")
    return rec


def test_world_model_gain_is_the_paired_mean_over_seeds_with_a_bootstrap_interval(tmp_path):
    sft, other_sft = tmp_path / "sft", tmp_path / "sft_small"
    recs = [
        _record(tmp_path, "variant=base", "eval", 0, sft, [0.0, 0.5, 1.0, 0.0], [0, 0, 1, 0], [0, 1]),
        _record(tmp_path, "variant=base", "eval", 1, sft, [0.0, 0.5, 1.0, 0.0], [0, 0, 1, 0], [0, 1]),
        _record(tmp_path, "variant=echo", "train", 0, sft, [1.0, 0.5, 1.0, 0.2], [1, 0, 1, 0], [1, 1]),
        _record(tmp_path, "variant=echo", "train", 1, sft, [0.5, 0.5, 0.0, 0.2], [0, 0, 0, 0], [1, 0]),
        _record(tmp_path, "variant=small", "train", 0, other_sft, [1.0] * 4, [1] * 4, [1, 1]),  # no base row
    ]
    table = world_model_report(recs, n_boot=2000)
    assert set(table["arm"]) == {"variant=echo"}
    rows = {r["source"]: r for r in table.to_dict("records")}
    assert set(rows) == {"all", "world", "bfcl"}
    # per transition: echo mean over seeds - base mean; w1 +0.75, w2 0, w3 -0.5, b1 +0.2
    assert rows["all"]["wm_leaf_f1_gain"] == pytest.approx((0.75 + 0 - 0.5 + 0.2) / 4)
    assert rows["world"]["wm_leaf_f1_gain"] == pytest.approx((0.75 + 0 - 0.5) / 3)
    assert rows["bfcl"]["wm_leaf_f1_gain"] == pytest.approx(0.2) and rows["bfcl"]["transitions"] == 1
    assert rows["bfcl"]["wm_leaf_f1_lo"] == pytest.approx(0.2) == rows["bfcl"]["wm_leaf_f1_hi"]
    assert rows["world"]["wm_exact_gain"] == pytest.approx((0.5 + 0 - 0.5) / 3)
    r = rows["all"]
    assert -0.5 <= r["wm_leaf_f1_lo"] < r["wm_leaf_f1_gain"] < r["wm_leaf_f1_hi"] <= 0.75
    # task gain: success per task, mean over seeds: t1 1 - 0, t2 0.5 - 1
    assert r["task_success_gain"] == pytest.approx((1 - 0.5) / 2) and r["tasks"] == 2 and r["seeds"] == "0,1"


def test_cells_on_different_transitions_are_refused(tmp_path):
    sft = tmp_path / "sft"
    recs = [_record(tmp_path, "variant=base", "eval", 0, sft, [0] * 4, [0] * 4),
            _record(tmp_path, "variant=echo", "train", 0, sft, [1] * 4, [1] * 4)]
    lines = (tmp_path / "variant=echo-0" / "scores.jsonl").read_text().splitlines()
    (tmp_path / "variant=echo-0" / "scores.jsonl").write_text("\n".join(lines[:-1]).replace('"w1"', '"zz"') + "\n")
    with pytest.raises(ValueError, match="different worldbench transitions"):
        world_model_report(recs, n_boot=200)


def test_paired_gain_resamples_transitions():
    base = np.array([[0.0], [1.0], [0.5]])
    d, lo, hi = paired_gain(base, base + 0.25, n_boot=500)
    assert (d, lo, hi) == pytest.approx((0.25, 0.25, 0.25))
    d, lo, hi = paired_gain(base, np.array([[1.0, 0.0], [1.0, 1.0], [0.5, 0.5]]), n_boot=2000)
    assert d == pytest.approx((0.5 + 0 + 0) / 3) and 0.0 <= lo < d < hi <= 0.5
    with pytest.raises(ValueError, match="same transitions"):
        paired_gain(base, np.zeros((2, 1)))


def test_world_model_dir_and_data_dir(tmp_path):
    for name in ("rehearse", "act"):
        (tmp_path / "ckpt" / name).mkdir(parents=True)
        (tmp_path / "ckpt" / name / "config.json").write_text("{}")
    assert world_model_dir(tmp_path / "ckpt") == tmp_path / "ckpt" / "rehearse"
    assert world_model_dir(tmp_path / "sft" / "model") == tmp_path / "sft" / "model"
    assert WorldbenchSpec().data_dir("runs/x").as_posix() == "runs/x/worldbench/data"
    assert WorldbenchSpec(data="data/worldbench").data_dir("runs/x").as_posix() == "data/worldbench"


def test_spearman_on_hand_ranked_pairs():
    # ranks (1,2,3,4) vs (1,3,2,4): d^2 = 0+1+1+0, rho = 1 - 6*2 / (4*15) = 0.8
    assert spearman(np.array([1.0, 2.0, 3.0, 4.0]), np.array([10.0, 30.0, 20.0, 40.0])) == pytest.approx(0.8)
    # a tie takes the average rank: x ranks (1.5, 1.5, 3) vs (1, 2, 3): cov 1.5/3, sd sqrt(.5) and sqrt(2/3)
    assert spearman(np.array([1.0, 1.0, 2.0]), np.array([1.0, 2.0, 3.0])) == pytest.approx(
        0.5 / (0.5 ** 0.5 * (2 / 3) ** 0.5))
    assert spearman(np.array([1.0, 2.0, 3.0]), np.array([3.0, 2.0, 1.0])) == pytest.approx(-1.0)
    assert np.isnan(spearman(np.array([1.0, 1.0, 1.0]), np.array([1.0, 2.0, 3.0])))


def test_gain_tracking_pairs_each_cell_with_its_seeds_base_row(tmp_path):
    sft = tmp_path / "sft"

    def rec(group, kind, seed, leaf, success):
        r = _record(tmp_path, group, kind, seed, sft, leaf, [0] * 4)
        r["metrics"] = {"eval/world/success": success}
        return r

    # leaf F1 values are binary fractions, so the two +0.25 gains tie exactly
    recs = [rec("variant=base", "eval", 0, [0.0] * 4, 0.50), rec("variant=base", "eval", 1, [0.25] * 4, 0.40),
            rec("variant=a", "train", 0, [0.5] * 4, 0.60),  # task +0.10, wm +0.5
            rec("variant=a", "train", 1, [0.5] * 4, 0.45),  # task +0.05, wm +0.25
            rec("variant=b", "train", 0, [0.25] * 4, 0.52),  # task +0.02, wm +0.25
            rec("variant=b", "train", 1, [0.0] * 4, 0.40)]  # task 0, wm -0.25
    t = gain_tracking(recs, n_boot=500)
    got = {(p["arm"], p["seed"]): (p["task_gain"], p["wm_gain"]) for p in t["points"]}
    want = {("variant=a", 0): (0.10, 0.5), ("variant=a", 1): (0.05, 0.25), ("variant=b", 0): (0.02, 0.25),
            ("variant=b", 1): (0.0, -0.25)}
    assert set(got) == set(want) and t["cells"] == 4
    for k, (tg, wg) in want.items():
        assert got[k] == pytest.approx((tg, wg)), k
    # task ranks (4, 3, 2, 1), wm ranks (4, 2.5, 2.5, 1): Pearson of the ranks
    rt, rw = np.array([4.0, 3.0, 2.0, 1.0]), np.array([4.0, 2.5, 2.5, 1.0])
    want_rho = float(np.corrcoef(rt, rw)[0, 1])
    assert t["rho"] == pytest.approx(want_rho) and -1.0 <= t["lo"] <= t["hi"] <= 1.0
    assert "Spearman rho +0.95" in markdown_tracking(t) and "4 trained cells" in markdown_tracking(t)
    paths = write_world_models(tmp_path / "results", world_model_report(recs, n_boot=200), t)
    assert "Spearman rho" in paths["world_models.md"].read_text()
    assert paths["world_model_points.csv"].read_text().splitlines()[0] == "arm,seed,task_gain,wm_gain"
    few = gain_tracking(recs[:3], n_boot=100)
    assert few["cells"] == 1 and np.isnan(few["rho"]) and "too few" in markdown_tracking(few)
