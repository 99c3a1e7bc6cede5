"""`bench/learning_signal.py --collect`'s seed-level table: the sweeps' paired_table over the collected runs, the
SFT model as every RL seed's base row, modes as passes, and each pair of methods past the first as a contrast."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from envace.evaluation.paired import TaskScores

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import learning_signal  # noqa: E402

IDS = ["t0", "t1"]


def _scores(success):
    """Greedy (one sample) and T=1 (two eval seeds) passes with the same per-task success everywhere."""
    return {"greedy": TaskScores(IDS, [0], 1, 0.0, [[s] for s in success], [[0.0], [0.0]]),
            "t1": TaskScores(IDS, [0, 1], 1, 1.0, [[s, s] for s in success], [[0.0, 0.0], [0.0, 0.0]])}


def test_collected_runs_get_the_seed_level_table():
    # SFT [0, 0]; envace per seed [1, 0], [1, 1], [1, 0] -> vs SFT 0.5, 1.0, 0.5; grpo [0, 0] each seed -> 0;
    # per_role [1, 1] each seed -> 1.0; contrast per_role - grpo_env: 1.0 on every seed
    runs = [(m, seed, f"runs/{m}_s{seed}", _scores(s)) for m, per_seed in (
        ("envace", ([1, 0], [1, 1], [1, 0])), ("grpo_env", ([0, 0],) * 3), ("per_role", ([1, 1],) * 3))
        for seed, s in enumerate(per_seed)]
    table = learning_signal.seed_level_table(_scores([0, 0]), runs, 200, "runs/sft/model")
    greedy = table[table["pass"] == "greedy"].set_index("comparison")
    assert list(greedy.index) == ["envace − sft", "grpo_env − sft", "per_role − sft", "grpo_env − envace",
                                  "per_role − envace", "per_role − grpo_env"]
    assert greedy["kind"].tolist() == ["vs base"] * 3 + ["vs reference"] * 2 + ["contrast"]
    assert greedy.loc["envace − sft", "success_diff"] == pytest.approx(2 / 3)
    assert greedy.loc["per_role − grpo_env", "success_diff"] == 1.0
    assert greedy.loc["per_role − grpo_env", "success_verdict"] == "A > B"  # every seed +1: p = 0, Holm keeps 0
    assert set(table["pass"]) == {"greedy", "t1"} and (table["n"] == 3).all()
    with pytest.raises(SystemExit, match="envace RL seed 0 is in runs/envace_s0 and in elsewhere"):
        learning_signal.seed_level_table(_scores([0, 0]), [*runs, ("envace", 0, "elsewhere", _scores([1, 1]))], 200,
                                         "runs/sft/model")
