"""The sweep's paired report on hand-worked cells (4 tasks, one sample per seed unless said otherwise).

Two-seed layout, two start models (rows: tasks; one column per seed):
  base (model A)       [[0,0],[1,1],[0,1],[1,0]]   envace (from A)   [[1,0],[1,1],[1,1],[1,0]]
  grpo (from A)        [[0,0],[1,1],[1,1],[0,0]]   base_small (B)    [[0,0],[0,0],[1,1],[0,0]]
  envace_small (B)     [[0,1],[0,0],[1,1],[0,0]]
envace - base per task (mean over seeds): [0.5, 0, 0.5, 0] -> +0.25.  grpo - envace: [-0.5, 0, 0, -0.5] -> -0.25.
gain(envace_small) - gain(envace): small gains [0.5, 0, 0, 0], envace gains [0.5, 0, 0.5, 0] -> [0, 0, -0.5, 0]
-> -0.125. Rewards are success / 2, so every reward difference is half the success one.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from envace.evaluation.seed_level import NO_CLAIM
from envace.sweeps.paired_report import COLUMNS, cell_scores, markdown_paired, paired_report

TASKS = ["t0", "t1", "t2", "t3"]
SUCCESS = {
    "variant=base": [[0, 0], [1, 1], [0, 1], [1, 0]],
    "variant=envace": [[1, 0], [1, 1], [1, 1], [1, 0]],
    "variant=grpo": [[0, 0], [1, 1], [1, 1], [0, 0]],
    "variant=base_small": [[0, 0], [0, 0], [1, 1], [0, 0]],
    "variant=envace_small": [[0, 1], [0, 0], [1, 1], [0, 0]],
}
KIND = {"variant=base": ("eval", "A"), "variant=base_small": ("eval", "B"), "variant=envace": ("train", "A"),
        "variant=grpo": ("train", "A"), "variant=envace_small": ("train", "B")}


def write_eval(path, seed, success, k=1, temperature=0.0):
    """An eval result file: `success` [tasks][k] of one seed; reward = success / 2."""
    path.write_text(json.dumps({"world": {"temperature": temperature, "per_task": {
        "task_ids": TASKS, "seeds": [seed], "k": k, "success": success,
        "reward": [[v / 2 for v in r] for r in success]}}}))
    return str(path)


def record(tmp_path, group, seed, kind, model, success, sft_seed=None, **passes):
    """A cell record; `passes` adds eval_files beyond the default one ({name: success})."""
    tag = f"{group}-{sft_seed}-{seed}"
    r = {"cell": f"{group},seed={seed}", "group": group, "seed": seed, "kind": kind,
         "eval_file": write_eval(tmp_path / f"{tag}.json", seed, success), "start_model": str(tmp_path / model)}
    if sft_seed is not None:
        r["sft_seed"] = sft_seed
    if passes:
        r["eval_files"] = {"default": r["eval_file"], **{name: write_eval(tmp_path / f"{tag}-{name}.json", seed, s,
                                                                           k=len(s[0]), temperature=1.0)
                                                          for name, s in passes.items()}}
    return r


def _records(tmp_path, order=tuple(SUCCESS), seeds=(0, 1)):
    out = []
    for group in order:
        kind, model = KIND[group]
        out += [record(tmp_path, group, seed, kind, model, [[row[col]] for row in SUCCESS[group]])
                for col, seed in enumerate((0, 1)) if seed in seeds]
    return out


def test_hand_worked_differences(tmp_path):
    table = paired_report(_records(tmp_path), n_boot=2000).set_index("comparison")
    assert list(table.reset_index().columns) == COLUMNS
    want = {"variant=envace − variant=base": ("vs base", 0.25),
            "variant=grpo − variant=base": ("vs base", 0.0),
            "variant=envace_small − variant=base_small": ("vs base", 0.125),
            "variant=grpo − variant=envace": ("vs reference", -0.25),
            "(variant=envace_small − variant=base_small) − (variant=envace − variant=base)":
                ("gain vs reference gain", -0.125)}
    assert sorted(table.index) == sorted(want)
    for name, (kind, diff) in want.items():
        row = table.loc[name]
        assert row["kind"] == kind and row["seeds"] == "0,1" and row["starts"] == "0" and row["n"] == 2
        assert row["tasks"] == 4 and row["samples"] == 1 and row["pass"] == "default"
        assert row["success_diff"] == pytest.approx(diff) and row["reward_diff"] == pytest.approx(diff / 2)
        assert row["success_task_lo"] <= diff <= row["success_task_hi"]
        assert row["success_verdict"] == NO_CLAIM and math.isnan(row["success_p_holm"])  # two seeds: no claim
    # bootstrap over tasks of envace - base: per-task diffs [0.5, 0, 0.5, 0], so the interval spans [0, 0.5]
    row = table.loc["variant=envace − variant=base"]
    assert row["success_task_lo"] == pytest.approx(0.0) and row["success_task_hi"] == pytest.approx(0.5)
    # per seed: seed 0 envace [1,1,1,1] - base [0,1,0,1] = 0.5, seed 1 [0,1,1,0] - [0,1,1,0] = 0; t(0.975, 1) = 12.706
    assert row["success_k_improved"] == 1
    assert row["success_seed_t_lo"] == pytest.approx(0.25 - 12.7062047 * 0.25, abs=1e-6)
    assert row["success_p"] == pytest.approx(0.5)  # t = 1 with 1 df (Cauchy): p = 1 - 2 atan(1) / pi
    assert row["success_iqm_a"] == pytest.approx(0.75) and row["success_iqm_b"] == pytest.approx(0.5)
    assert row["success_poi"] == pytest.approx(0.75)  # A runs [1, .5] vs B [.5, .5]: 1, 1, 1/2, 1/2
    assert "variant=grpo − variant=envace" in markdown_paired(paired_report(_records(tmp_path), n_boot=200))


THREE = {  # 3 seeds, 4 tasks: per seed the success of every task
    "variant=base": [[0, 0, 0, 1], [0, 0, 0, 1], [0, 0, 0, 0]],
    "variant=envace": [[1, 1, 1, 1], [1, 1, 1, 1], [1, 1, 1, 1]],
    "variant=grpo": [[0, 0, 0, 1], [0, 0, 0, 1], [0, 0, 0, 0]],
}


def _three(tmp_path):
    return [record(tmp_path, g, seed, "eval" if g == "variant=base" else "train", "A", [[v] for v in s])
            for g, per_seed in THREE.items() for seed, s in enumerate(per_seed)]


def test_three_seeds_get_holm_adjusted_verdicts(tmp_path):
    # envace - base per seed [0.75, 0.75, 1.0]: mean 0.8333, se = 1/12, t = 10, p (2 df) = 1 - 10 / sqrt(102)
    # = 0.0098518. grpo = base: every difference 0, p = 1. grpo - envace: the mirror, same p.
    # Holm (m = 3): 3 x 0.0098518 = 0.0295553, then max(2 x 0.0098518, 0.0295553), then 1.
    table = paired_report(_three(tmp_path), n_boot=1000).set_index("comparison")
    p = 1 - 10 / math.sqrt(102)
    up, same, down = (table.loc[f"variant={a} − variant={b}"] for a, b in
                      (("envace", "base"), ("grpo", "base"), ("grpo", "envace")))
    assert up["success_diff"] == pytest.approx(2.5 / 3) and up["success_p"] == pytest.approx(p)
    assert up["success_p_holm"] == pytest.approx(3 * p) and down["success_p_holm"] == pytest.approx(3 * p)
    assert same["success_p"] == 1.0 and same["success_p_holm"] == 1.0
    assert up["success_verdict"] == "A > B" and down["success_verdict"] == "A < B"
    assert same["success_verdict"] == "no difference detected, |Δ| < 0.001"  # h = 0
    assert up["success_k_improved"] == 3 and up["n"] == 3 and up["seeds"] == "0,1,2"
    # run scores: envace [1, 1, 1], base [0.25, 0.25, 0]: IQM of 3 is the mean; every pair improves
    assert up["success_iqm_a"] == 1.0 and up["success_iqm_b"] == pytest.approx(0.5 / 3) and up["success_poi"] == 1.0
    assert 0.0 <= up["success_seed_boot_lo"] < 2.5 / 3 < up["success_seed_boot_hi"] <= 1.0  # per-task diffs in [0, 1]
    md = markdown_paired(table.reset_index())
    assert "Unit of inference: the training run" in md and "Holm over the m = 3 comparisons of this table" in md
    assert "| variant=envace − variant=base | vs base | 0 | 0,1,2 | 4 | success | +0.833 |" in md


def test_several_sft_starts_match_bases_per_start_model(tmp_path):
    # start 0 trains from model S0 (base all 0), start 1 from S1 (base all 1); envace is all 1 everywhere:
    # per-replicate differences 1 (start 0) and 0 (start 1); units = start means [1, 0] -> Δ 0.5, t = 1, 1 df, p 0.5
    records = []
    for start, base in ((0, 0), (1, 1)):
        for seed in (0, 1, 2):
            records.append(record(tmp_path, "variant=base", seed, "eval", f"S{start}", [[base]] * 4, sft_seed=start))
            records.append(record(tmp_path, "variant=envace", seed, "train", f"S{start}", [[1]] * 4, sft_seed=start))
    (row,) = paired_report(records, n_boot=500).to_dict("records")
    assert row["comparison"] == "variant=envace − variant=base" and row["starts"] == "0,1" and row["n"] == 6
    assert row["success_diff"] == pytest.approx(0.5) and row["success_p"] == pytest.approx(0.5)
    assert row["success_k_improved"] == 3
    assert row["success_task_lo"] == pytest.approx(0.5) and row["success_task_hi"] == pytest.approx(0.5)
    assert row["success_verdict"].startswith("no difference detected")


def test_one_table_per_evaluation_pass(tmp_path):
    # the t1_k2 pass has 2 samples per task: envace [[1,1],[1,0],...], base all 0 -> per seed 0.875
    records = []
    for seed in (0, 1, 2):
        records.append(record(tmp_path, "variant=base", seed, "eval", "A", [[0]] * 4, t1_k2=[[0, 0]] * 4))
        records.append(record(tmp_path, "variant=envace", seed, "train", "A", [[1]] * 4,
                              t1_k2=[[1, 1], [1, 0], [1, 1], [1, 1]]))
    table = paired_report(records, n_boot=200)
    assert table["pass"].tolist() == ["default", "t1_k2"]
    t1 = table.set_index("pass").loc["t1_k2"]
    assert t1["samples"] == 2 and t1["success_diff"] == pytest.approx(0.875)
    md = markdown_paired(table)
    assert "#### pass `default`" in md and "#### pass `t1_k2`" in md and md.count("Holm over the m = 1") == 2


def test_contrasts_add_rows_and_say_when_they_cannot(tmp_path):
    contrasts = [("variant=envace", "variant=grpo"), ("variant=grpo", "variant=base"), ("variant=envace", "nope")]
    table = paired_report(_three(tmp_path), contrasts=contrasts, n_boot=200).set_index("comparison")
    assert table.loc["variant=envace − variant=grpo", "kind"] == "contrast"
    assert table.loc["variant=envace − variant=grpo", "success_diff"] == pytest.approx(2.5 / 3)
    assert (table.index == "variant=grpo − variant=base").sum() == 1  # already there as vs base
    missing = table.loc["variant=envace − nope"]
    assert missing["n"] == 0 and "no finished cell of nope" in missing["success_verdict"]
    assert "variant=envace − nope" in markdown_paired(table.reset_index())
    with pytest.raises(ValueError, match="pair of group names"):
        paired_report(_three(tmp_path), contrasts=["variant=envace"])


def test_only_shared_seeds_are_paired(tmp_path):
    records = [r for r in _records(tmp_path) if not (r["group"] == "variant=envace" and r["seed"] == 1)]
    row = paired_report(records, n_boot=200).set_index("comparison").loc["variant=envace − variant=base"]
    # seed 0 only: envace [1,1,1,1] - base [0,1,0,1] -> 0.5
    assert row["seeds"] == "0" and row["n"] == 1 and row["success_diff"] == pytest.approx(0.5)


def test_cells_without_outcomes_give_an_empty_table(tmp_path):
    (tmp_path / "old.json").write_text(json.dumps({"world": {"success": 0.5}}))  # an eval file from before per_task
    records = [{"group": "variant=envace", "seed": 0, "kind": "train", "eval_file": str(tmp_path / "old.json")}]
    assert cell_scores(records[0]) is None
    table = paired_report(records)
    assert table.empty and "no paired comparisons" in markdown_paired(table)


def test_cells_on_different_tasks_are_refused(tmp_path):
    records = _records(tmp_path)
    moved = json.loads(open(records[2]["eval_file"]).read())
    moved["world"]["per_task"]["task_ids"] = ["x0", "x1", "x2", "x3"]
    open(records[2]["eval_file"], "w").write(json.dumps(moved))
    with pytest.raises(ValueError, match="different tasks"):
        paired_report(records, n_boot=100)


def test_bad_records_are_refused(tmp_path):
    records = _three(tmp_path)
    with pytest.raises(ValueError, match="sft_seed = 'one' is not an integer"):
        paired_report([{**records[0], "sft_seed": "one"}, *records[1:]])
    with pytest.raises(ValueError, match="both group 'variant=base' at SFT start 0, seed 0"):
        paired_report([records[0], {**records[0], "cell": "again"}, *records[1:]])


def test_scores_keep_the_file_layout(tmp_path):
    s = cell_scores(_records(tmp_path)[0])
    assert s.task_ids == TASKS and s.seeds == [0] and np.array_equal(s.success[:, 0], [0, 1, 0, 1])
