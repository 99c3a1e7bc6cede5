"""Paired evaluation: intervals against hand computations and slow loops, pass@k by hand, and per-task
scores from a real tool-world rollout with an engine that replays the gold conversation on chosen tasks."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from envace.config import RolloutConfig, SamplingConfig
from envace.engines.base import GenResult
from envace.evaluation.paired import (
    Split,
    TaskScores,
    compare,
    held_out_tasks,
    mean_interval,
    paired_bootstrap,
    paired_t,
    pass_at_k,
    per_task_pass_at_k,
    score_tasks,
    tasks_for_half_width,
)
from envace.evaluation.world import evaluate_world
from envace.models.loading import load_policy
from envace.trainers.sft_samples import act_turns


def test_paired_t_matches_hand_computation():
    # d = [1, 2, 3, 4]: mean 2.5, sd = sqrt(5/3) = 1.290994, se = 0.645497, t(3, .975) = 3.182446
    base = np.zeros(4)
    other = np.array([1.0, 2.0, 3.0, 4.0])
    iv = paired_t(base, other)
    hw = 3.182446 * math.sqrt(5 / 3) / 2
    assert iv.mean == pytest.approx(2.5)
    assert (iv.lo, iv.hi) == (pytest.approx(2.5 - hw, abs=1e-5), pytest.approx(2.5 + hw, abs=1e-5))
    # per-sample columns are averaged per task first: [[0,2],[2,4],...] - 0 gives the same d
    iv2 = paired_t(np.zeros((4, 2)), np.array([[0, 2], [2, 2], [3, 3], [5, 3]], dtype=float))
    assert (iv2.lo, iv2.hi) == (pytest.approx(iv.lo), pytest.approx(iv.hi))
    assert mean_interval(other).half_width == pytest.approx(hw, abs=1e-5)


def test_paired_bootstrap_matches_slow_loop_and_exact_distribution():
    rng = np.random.default_rng(3)
    base, other = rng.random((37, 3)), rng.random((37, 3))
    fast = paired_bootstrap(base, other, n_boot=500, seed=11)
    # the slow, obviously correct loop over the same random draws
    d = [float(np.mean(o) - np.mean(b)) for b, o in zip(base, other)]
    draws = np.random.default_rng(11).integers(0, len(d), size=(500, len(d)))
    means = sorted(sum(d[i] for i in row) / len(d) for row in draws)
    lo = np.quantile(means, 0.025)
    hi = np.quantile(means, 0.975)
    assert fast.mean == pytest.approx(sum(d) / len(d))
    assert (fast.lo, fast.hi) == (pytest.approx(lo), pytest.approx(hi))
    # two tasks with d = [0, 1]: bootstrap means are 0, 0.5, 1 with probabilities 1/4, 1/2, 1/4,
    # so the 2.5 % quantile is 0 and the 97.5 % quantile is 1; the median is 0.5
    iv = paired_bootstrap(np.zeros(2), np.array([0.0, 1.0]), n_boot=20_000, seed=0)
    assert (iv.lo, iv.hi, iv.mean) == (0.0, 1.0, 0.5)
    iv50 = paired_bootstrap(np.zeros(2), np.array([0.0, 1.0]), n_boot=20_000, seed=0, level=0.4)
    assert (iv50.lo, iv50.hi) == (0.5, 0.5)


def test_pass_at_k_by_hand_and_by_enumeration():
    assert pass_at_k(4, 1, 2) == pytest.approx(1 - 3 / 6)
    assert pass_at_k(4, 0, 4) == 0.0 and pass_at_k(4, 3, 2) == 1.0 and pass_at_k(5, 2, 1) == pytest.approx(0.4)
    # enumeration: the share of k-subsets of the n samples that contain a success
    for n, c, k in [(5, 2, 3), (6, 1, 2), (6, 4, 5)]:
        samples = [1] * c + [0] * (n - c)
        subsets = list(itertools.combinations(samples, k))
        assert pass_at_k(n, c, k) == pytest.approx(sum(any(s) for s in subsets) / len(subsets))
    assert per_task_pass_at_k(np.array([[1, 0, 0, 0], [0, 0, 0, 0]]), 2).tolist() == [0.5, 0.0]
    with pytest.raises(ValueError, match="k <= n"):
        pass_at_k(2, 1, 3)


def test_tasks_for_half_width():
    # z = 1.959964; (1.959964 * 0.16 / 0.01)^2 = 983.4 -> 984 tasks
    assert tasks_for_half_width(0.16, 0.01) == 984


def _scores(ids, succ, rew, seeds=(0,)):
    return TaskScores(list(ids), list(seeds), 1, 1.0, np.array(succ, dtype=float), np.array(rew, dtype=float))


def test_compare_reports_pass_at_n_and_refuses_unpaired_inputs():
    a = _scores("abc", [[0, 0], [1, 0], [0, 0]], [[0.2, 0.4], [1, 0.5], [0, 0]], seeds=(0, 1))
    b = _scores("abc", [[1, 0], [1, 1], [0, 0]], [[0.6, 0.4], [1, 1], [0, 0.3]], seeds=(0, 1))
    c = compare(a, b, n_boot=200)
    assert c["success"]["base"] == pytest.approx(1 / 6) and c["success"]["other"] == pytest.approx(3 / 6)
    assert c["success"]["diff"] == pytest.approx(2 / 6)
    # pass@2 per task: a = [0, 1, 0], b = [1, 1, 0]
    assert c["pass@2"]["base"] == pytest.approx(1 / 3) and c["pass@2"]["other"] == pytest.approx(2 / 3)
    # reward diffs per task: [0.2, 0.25, 0.15]
    assert c["reward"]["diff"] == pytest.approx(0.2)
    assert c["reward"]["sd_diff"] == pytest.approx(0.05)
    with pytest.raises(ValueError, match="same tasks"):
        compare(a, _scores("abd", [[0, 0]] * 3, [[0, 0]] * 3, seeds=(0, 1)))
    with pytest.raises(ValueError, match="same seeds"):
        compare(a, _scores("abc", [[0, 0]] * 3, [[0, 0]] * 3, seeds=(0, 2)))
    with pytest.raises(ValueError, match="expected"):
        _scores("abc", [[0]], [[0]])


def test_splits_are_fixed_and_disjoint():
    val, test = held_out_tasks(Split.VALIDATION, 12), held_out_tasks("test", 12)
    assert [t.uuid for t in val] == [t.uuid for t in held_out_tasks("val", 12)]
    assert {t.meta["split"] for t in val} == {"val"} and {t.meta["split"] for t in test} == {"test"}
    with pytest.raises(ValueError):
        held_out_tasks("train", 3)


class GoldEngine:
    """Replays the gold assistant message of tasks in `good` (found by their first user message in the
    prompt); on other tasks it answers 'no idea.' and ends the episode. A real tokenizer, no model."""

    def __init__(self, tokenizer, tasks, good):
        self.tokenizer = tokenizer
        self.eos_id = tokenizer.convert_tokens_to_ids("<|im_end|>")
        self.by_user = {next(m.content for m in t.messages if m.role == "user"): (t, t.uuid in good) for t in tasks}
        assert len(self.by_user) == len(tasks), "first user messages must identify the tasks"
        self.targets = {t.uuid: [turn.target for turn in act_turns(t, tokenizer)] for t in tasks}

    def generate(self, requests):
        out = []
        for req in requests:
            prompt = self.tokenizer.decode(req.prompt_ids)
            task, good = next(v for u, v in self.by_user.items() if u in prompt)
            pos = prompt.count("<|im_start|>assistant\n") - 1
            text = self.targets[task.uuid][pos] if good else "no idea.<|im_end|>"
            ids = self.tokenizer.encode(text, add_special_tokens=False)
            out.append(GenResult(token_ids=ids, logprobs=[-0.1] * len(ids), text=text.replace("<|im_end|>", "")))
        return out


def test_score_tasks_keeps_each_task_in_its_row(tiny_dir):
    _, tok = load_policy(tiny_dir)
    tasks = held_out_tasks("val", 6)
    good = {tasks[0].uuid, tasks[3].uuid, tasks[4].uuid}
    engine = GoldEngine(tok, tasks, good)
    # the test tokenizer is not the world's, so its prompts are long: a generous context limit
    rollout = RolloutConfig(mode="env", act=SamplingConfig(temperature=0.0, max_new_tokens=256),
                            rehearse=SamplingConfig(temperature=0.0, max_new_tokens=64), max_context_tokens=100_000)
    ts = score_tasks(engine, tasks, seeds=[0, 1], temperature=1.0, rollout=rollout)
    assert ts.success.shape == (6, 2)
    assert ts.success[:, 0].tolist() == [1.0, 0.0, 0.0, 1.0, 1.0, 0.0]
    assert (ts.success[:, 0] == ts.success[:, 1]).all()
    assert (ts.reward[[0, 3, 4]] == 1.0).all() and (ts.reward[[1, 2, 5]] < 1.0).all()
    ref = evaluate_world(engine, tasks, rollout, seeds=[0, 1], temperature=1.0, with_fidelity=False)
    assert ts.success.mean() == pytest.approx(ref["success"]) and ts.reward.mean() == pytest.approx(ref["reward"])
    assert ts.meta["summary"]["reward_per_seed"] == ref["reward_per_seed"]
    # evaluate_world keeps every episode's outcome in the same layout (what the sweep's paired report reads)
    assert ref["per_task"]["task_ids"] == ts.task_ids and ref["per_task"]["seeds"] == [0, 1]
    assert ref["per_task"]["success"] == ts.success.tolist() and ref["per_task"]["reward"] == ts.reward.tolist()
