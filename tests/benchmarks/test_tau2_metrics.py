"""pass^k and Avg@k on hand-worked examples, and pass^k against its definition by enumeration."""

from __future__ import annotations

import itertools
import random

import pytest

from envace.benchmarks.tau2.scoring import avg_at_k, is_success, mean_pass_hat_k, pass_hat_k, pass_hat_ks


def test_pass_hat_k_hand_worked():
    # task A: 4 trials, 3 successes; task B: 4 trials, 1 success; task C: 4 trials, 4 successes
    rewards = {"A": [1, 1, 0, 1], "B": [0, 0, 1, 0], "C": [1.0, 1.0, 1.0, 1.0]}
    # pass^1 = (3/4 + 1/4 + 1) / 3 = 2/3
    # pass^2 = (C(3,2)/C(4,2) + C(1,2)/C(4,2) + 1) / 3 = (3/6 + 0 + 1) / 3 = 1/2
    # pass^3 = (C(3,3)/C(4,3) + 0 + 1) / 3 = (1/4 + 1) / 3 = 5/12
    # pass^4 = (0 + 0 + 1) / 3 = 1/3
    assert pass_hat_ks(rewards) == pytest.approx({1: 2 / 3, 2: 1 / 2, 3: 5 / 12, 4: 1 / 3})
    assert avg_at_k(rewards) == pytest.approx(8 / 12)
    assert pass_hat_k(4, 3, 2) == pytest.approx(0.5)


def test_avg_counts_unscored_as_zero_and_partial_rewards_are_not_successes():
    assert avg_at_k({"a": [1.0, None], "b": [0.5, 0.5]}) == pytest.approx(0.5)
    assert mean_pass_hat_k({"a": [0.999999999, 0.5]}, 1) == pytest.approx(0.5)
    assert not is_success(0.5) and is_success(1 - 1e-9) and not is_success(None)


def test_pass_hat_k_matches_enumeration_over_subsets():
    rng = random.Random(0)
    for _ in range(50):
        n = rng.randint(1, 7)
        outcomes = [rng.random() < 0.6 for _ in range(n)]
        for k in range(1, n + 1):
            subsets = list(itertools.combinations(range(n), k))
            slow = sum(all(outcomes[i] for i in s) for s in subsets) / len(subsets)
            assert pass_hat_k(n, sum(outcomes), k) == pytest.approx(slow)


def test_bad_arguments_name_the_problem():
    with pytest.raises(ValueError, match="k=5"):
        pass_hat_k(4, 2, 5)
    with pytest.raises(ValueError, match="c=5"):
        pass_hat_k(4, 5, 1)
    assert pass_hat_ks({}) == {} and avg_at_k({}) is None
