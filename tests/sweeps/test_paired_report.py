"""The sweep's paired report on hand-worked cells: 4 tasks, seeds 0 and 1, two start models.

Per-task success (rows: tasks; one column per seed):
  base (model A)       [[0,0],[1,1],[0,1],[1,0]]   envace (from A)   [[1,0],[1,1],[1,1],[1,0]]
  grpo (from A)        [[0,0],[1,1],[1,1],[0,0]]   base_small (B)    [[0,0],[0,0],[1,1],[0,0]]
  envace_small (B)     [[0,1],[0,0],[1,1],[0,0]]
envace - base per task (mean over seeds): [0.5, 0, 0.5, 0] -> +0.25.  grpo - envace: [-0.5, 0, 0, -0.5] -> -0.25.
gain(envace_small) - gain(envace): small gains [0.5, 0, 0, 0], envace gains [0.5, 0, 0.5, 0] -> [0, 0, -0.5, 0]
-> -0.125. Rewards are success / 2, so every reward difference is half the success one.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from envace.sweeps.paired_report import cell_scores, markdown_paired, paired_report

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


def _records(tmp_path, order=("variant=base", "variant=base_small", "variant=envace", "variant=grpo",
                              "variant=envace_small"), seeds=(0, 1)):
    records = []
    for group in order:
        kind, model = KIND[group]
        for col, seed in enumerate((0, 1)):
            if seed not in seeds:
                continue
            succ = [[row[col]] for row in SUCCESS[group]]
            path = tmp_path / f"{group}-{seed}.json"
            path.write_text(json.dumps({"world": {"temperature": 0.0, "per_task": {
                "task_ids": TASKS, "seeds": [seed], "k": 1, "success": succ,
                "reward": [[v / 2 for v in r] for r in succ]}}}))
            records.append({"group": group, "seed": seed, "kind": kind, "eval_file": str(path),
                            "start_model": str(tmp_path / model)})
    return records


def test_hand_worked_differences(tmp_path):
    table = paired_report(_records(tmp_path), n_boot=2000).set_index("comparison")
    want = {"variant=envace − variant=base": ("vs base", 0.25),
            "variant=grpo − variant=base": ("vs base", 0.0),
            "variant=envace_small − variant=base_small": ("vs base", 0.125),
            "variant=grpo − variant=envace": ("vs reference", -0.25),
            "(variant=envace_small − variant=base_small) − (variant=envace − variant=base)":
                ("gain vs reference gain", -0.125)}
    assert sorted(table.index) == sorted(want)
    for name, (kind, diff) in want.items():
        row = table.loc[name]
        assert row["kind"] == kind and row["seeds"] == "0,1" and row["tasks"] == 4 and row["samples"] == 2
        assert row["success_diff"] == pytest.approx(diff) and row["reward_diff"] == pytest.approx(diff / 2)
        assert row["success_lo"] <= diff <= row["success_hi"]
    # bootstrap over tasks of envace - base: per-task diffs [0.5, 0, 0.5, 0], so the interval spans [0, 0.5]
    row = table.loc["variant=envace − variant=base"]
    assert row["success_lo"] == pytest.approx(0.0) and row["success_hi"] == pytest.approx(0.5)
    assert row["success"] == "+0.250 [+0.000, +0.500]"
    assert "variant=grpo − variant=envace" in markdown_paired(paired_report(_records(tmp_path), n_boot=200))


def test_only_shared_seeds_are_paired(tmp_path):
    records = [r for r in _records(tmp_path) if not (r["group"] == "variant=envace" and r["seed"] == 1)]
    row = paired_report(records, n_boot=200).set_index("comparison").loc["variant=envace − variant=base"]
    # seed 0 only: envace [1,1,1,1] - base [0,1,0,1] -> 0.5
    assert row["seeds"] == "0" and row["samples"] == 1 and row["success_diff"] == pytest.approx(0.5)


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
    with pytest.raises(ValueError, match="same tasks|different tasks"):
        paired_report(records, n_boot=100)


def test_scores_keep_the_file_layout(tmp_path):
    s = cell_scores(_records(tmp_path)[0])
    assert s.task_ids == TASKS and s.seeds == [0] and np.array_equal(s.success[:, 0], [0, 1, 0, 1])
