"""Role-wise and plain GRPO advantages: the hand-worked example, edge rules, and loop-vs-vectorised parity."""

from __future__ import annotations

import math
import random
import statistics

import numpy as np
import pytest
import torch

from envace.algos import ADVANTAGES, get_advantage_fn, grpo_advantages, role_grpo_advantages
from envace.types import Role

ACT, REH = Role.ACT, Role.REHEARSE


def _columns(rows):
    prompts, trajs, roles, rewards = zip(*rows)
    return torch.tensor(rewards, dtype=torch.float32), list(prompts), list(trajs), list(roles)


# Prompt x, K=2. T1 (R=1): 2 act rows + 1 rehearse row. T2 (R=0): 1 act row + 2 rehearse rows.
HAND_ROWS = [
    ("x", 1, ACT, 1.0),
    ("x", 1, ACT, 1.0),
    ("x", 1, REH, 1.0),
    ("x", 2, ACT, 0.0),
    ("x", 2, REH, 0.0),
    ("x", 2, REH, 0.0),
]


def test_hand_worked_per_output():
    # mu_act = (1+1+0)/3 = 2/3, mu_rehearse = (1+0+0)/3 = 1/3
    adv = role_grpo_advantages(*_columns(HAND_ROWS))
    expected = [1 / 3, 1 / 3, 2 / 3, -2 / 3, -1 / 3, -1 / 3]
    assert adv.dtype == torch.float32 and adv.shape == (6,)
    assert adv.tolist() == pytest.approx(expected, abs=1e-7)


def test_hand_worked_per_trajectory():
    # each trajectory counts once per role: mu_act = mu_rehearse = (1+0)/2
    adv = role_grpo_advantages(*_columns(HAND_ROWS), weighting="per_trajectory")
    assert adv.tolist() == pytest.approx([0.5, 0.5, 0.5, -0.5, -0.5, -0.5], abs=1e-7)


def test_hand_worked_plain_grpo():
    # one group for the prompt, all 6 rows: mu = 3/6
    adv = grpo_advantages(*_columns(HAND_ROWS))
    assert adv.tolist() == pytest.approx([0.5, 0.5, 0.5, -0.5, -0.5, -0.5], abs=1e-7)


def test_hand_worked_norm_std():
    # per_output act group rows {1,1,0}: mean 2/3, sample std sqrt(((1/3)^2*2 + (2/3)^2)/2) = sqrt(1/3)
    adv = role_grpo_advantages(*_columns(HAND_ROWS), norm_std=True, eps=0.0)
    s = math.sqrt(1 / 3)
    expected = [1 / 3, 1 / 3, 2 / 3, -2 / 3, -1 / 3, -1 / 3]
    assert adv.tolist() == pytest.approx([e / s for e in expected], abs=1e-6)
    # per_trajectory: members {1, 0}, sample std sqrt(0.5)
    adv = role_grpo_advantages(*_columns(HAND_ROWS), weighting="per_trajectory", norm_std=True, eps=0.0)
    assert adv.tolist() == pytest.approx([0.5 / math.sqrt(0.5)] * 3 + [-0.5 / math.sqrt(0.5)] * 3, abs=1e-6)


def test_role_strings_equal_role_enums():
    rewards, p, t, roles = _columns(HAND_ROWS)
    as_str = [r.value for r in roles]
    assert torch.equal(role_grpo_advantages(rewards, p, t, roles), role_grpo_advantages(rewards, p, t, as_str))


def test_single_trajectory_group_has_zero_advantage():
    # Unlike verl's size-1 rule (mean 0 -> A = R), a lone trajectory has nothing to contrast with.
    rows = [("y", 0, ACT, 0.7), ("y", 0, REH, 0.7), ("y", 0, ACT, 0.7)]
    for weighting in ("per_output", "per_trajectory"):
        assert role_grpo_advantages(*_columns(rows), weighting=weighting).tolist() == [0.0, 0.0, 0.0]
        assert role_grpo_advantages(*_columns(rows), weighting=weighting, norm_std=True).tolist() == [0.0] * 3


def test_role_present_in_only_one_trajectory():
    # T1 has a rehearse row, T2 does not: the rehearse group is T1 alone -> 0; act contrasts 1 vs 0.
    rows = [("x", 1, ACT, 1.0), ("x", 1, REH, 1.0), ("x", 2, ACT, 0.0)]
    assert role_grpo_advantages(*_columns(rows)).tolist() == pytest.approx([0.5, 0.0, -0.5])


def test_nan_rows_left_out_of_baseline_and_get_zero():
    rows = [("x", 1, ACT, 1.0), ("x", 2, ACT, float("nan")), ("x", 3, ACT, 0.0), ("x", 4, ACT, 0.0)]
    adv = role_grpo_advantages(*_columns(rows))
    # mu over scored rows {1, 0, 0} = 1/3 (not 1/4 as it would be with NaN read as 0)
    assert adv.tolist() == pytest.approx([2 / 3, 0.0, -1 / 3, -1 / 3])


def test_all_unscored_group_gives_zero():
    nan = float("nan")
    rows = [("x", 1, ACT, nan), ("x", 2, ACT, nan), ("z", 1, ACT, 1.0), ("z", 2, ACT, 0.0)]
    assert role_grpo_advantages(*_columns(rows)).tolist() == pytest.approx([0.0, 0.0, 0.5, -0.5])


def test_trajectory_ids_are_scoped_by_prompt():
    # Sample indices 0..K-1 reused across prompts must not merge trajectories of different prompts.
    rows = [("a", 0, ACT, 1.0), ("a", 1, ACT, 0.0), ("b", 0, ACT, 0.0), ("b", 0, ACT, 0.0), ("b", 1, ACT, 1.0)]
    adv = role_grpo_advantages(*_columns(rows), weighting="per_trajectory")
    assert adv.tolist() == pytest.approx([0.5, -0.5, -0.5, -0.5, 0.5])


def test_id_containers_agree():
    rewards, p, t, roles = _columns(HAND_ROWS)
    base = role_grpo_advantages(rewards, p, t, roles, weighting="per_trajectory")
    as_np = role_grpo_advantages(rewards, np.array(p), np.array(t), np.array([r.value for r in roles]),
                                 weighting="per_trajectory")
    as_tensor = role_grpo_advantages(rewards.tolist(), torch.zeros(6, dtype=torch.long), torch.tensor(t), tuple(roles),
                                     weighting="per_trajectory")
    assert torch.equal(base, as_np) and torch.equal(base, as_tensor)


def test_empty_batch():
    out = role_grpo_advantages(torch.zeros(0), [], [], [])
    assert out.shape == (0,) and out.dtype == torch.float32


def test_registry_lookup():
    assert get_advantage_fn("role_grpo") is role_grpo_advantages
    assert get_advantage_fn("grpo") is grpo_advantages
    assert ADVANTAGES.names() == ["grpo", "role_grpo", "role_moving_average"]
    with pytest.raises(ValueError, match="grpo, role_grpo, role_moving_average"):
        get_advantage_fn("gae")


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"rewards": torch.tensor([1.0, float("inf")])}, r"rewards\[1\]=inf.*NaN"),
        ({"prompt_ids": ["x"]}, "prompt_ids has 1 entries but rewards has 2"),
        ({"trajectory_ids": torch.tensor([0.0, 1.0])}, "trajectory_ids must hold integer"),
        ({"roles": [ACT, "critic"]}, r"roles\[1\]='critic' is not a role.*act, rehearse"),
        ({"prompt_ids": [["x"], ["y"]]}, r"prompt_ids\[0\]=\['x'\] is not hashable"),
        ({"weighting": "per_token"}, "weighting='per_token'.*per_output, per_trajectory"),
        ({"eps": -1.0}, "eps=-1.0"),
        ({"rewards": torch.ones(2, 1)}, "rewards must be 1-D"),
    ],
)
def test_bad_input_errors(kwargs, match):
    args = {"rewards": torch.tensor([1.0, 0.0]), "prompt_ids": ["x", "x"], "trajectory_ids": [0, 1],
            "roles": [ACT, ACT]}
    args.update(kwargs)
    options = {k: args.pop(k) for k in ("weighting", "eps") if k in args}
    with pytest.raises(ValueError, match=match):
        role_grpo_advantages(args["rewards"], args["prompt_ids"], args["trajectory_ids"], args["roles"], **options)


# ---- slow, obviously correct reference -------------------------------------------------------------------


def _slow_advantages(rewards, prompts, trajs, roles, *, by_role, weighting, norm_std, eps):
    """One group at a time, plain Python floats."""
    n = len(rewards)
    keys = [(prompts[i], Role(roles[i]) if by_role else None) for i in range(n)]
    scored_rows: dict = {}  # group key -> indices of its scored rows
    for j in range(n):
        if not math.isnan(rewards[j]):
            scored_rows.setdefault(keys[j], []).append(j)
    out = []
    for i in range(n):
        if math.isnan(rewards[i]):
            out.append(0.0)
            continue
        if weighting == "per_output":
            values = [rewards[j] for j in scored_rows[keys[i]]]
        else:
            by_traj: dict = {}
            for j in scored_rows[keys[i]]:
                by_traj.setdefault(trajs[j], []).append(rewards[j])
            values = [statistics.fmean(v) for v in by_traj.values()]
        a = rewards[i] - statistics.fmean(values)
        if norm_std:
            std = statistics.stdev(values) if len(values) >= 2 else 1.0
            a = a / (std + eps)
        out.append(a)
    return out


def _random_batch(rng: random.Random):
    rows = []
    for p in range(rng.randint(1, 5)):
        prompt = f"p{p}" if rng.random() < 0.5 else p
        for k in range(rng.randint(1, 5)):
            reward = float(rng.choice([0.0, 1.0, rng.random()]))
            unscored_traj = rng.random() < 0.1
            for role in (ACT, REH):
                for _ in range(rng.randint(0, 4)):
                    r = reward
                    if unscored_traj or rng.random() < 0.05:
                        r = float("nan")
                    elif rng.random() < 0.05:
                        r = reward - 0.1  # a per-row penalty, as the reference's invalid-action penalty
                    rows.append((prompt, k, role if rng.random() < 0.5 else role.value, r))
    if not rows:
        rows.append(("p0", 0, ACT, 1.0))
    rng.shuffle(rows)
    return rows


@pytest.mark.parametrize("fn_name", ["role_grpo", "grpo"])
@pytest.mark.parametrize("weighting", ["per_output", "per_trajectory"])
@pytest.mark.parametrize("norm_std", [False, True])
def test_vectorised_matches_loop(fn_name, weighting, norm_std):
    rng = random.Random(f"{fn_name}-{weighting}-{norm_std}")
    fn = get_advantage_fn(fn_name)
    n_nonzero = 0
    for _ in range(60):
        rows = _random_batch(rng)
        prompts, trajs, roles, rewards = zip(*rows)
        got = fn(torch.tensor(rewards, dtype=torch.float32), prompts, trajs, roles,
                 weighting=weighting, norm_std=norm_std, eps=1e-6)
        # the reference sees the same float32-rounded rewards the function sees
        r32 = [float(x) for x in torch.tensor(rewards, dtype=torch.float32)]
        want = _slow_advantages(r32, prompts, trajs, roles, by_role=fn_name == "role_grpo",
                                weighting=weighting, norm_std=norm_std, eps=1e-6)
        assert got.tolist() == pytest.approx(want, abs=1e-5, rel=1e-5)
        n_nonzero += sum(abs(w) > 1e-6 for w in want)
    assert n_nonzero > 100  # the batches really exercise non-trivial groups


def test_role_grouping_differs_from_plain_grpo_on_random_batches():
    # guards against role_grpo silently ignoring roles
    rng = random.Random(7)
    differs = 0
    for _ in range(20):
        prompts, trajs, roles, rewards = zip(*_random_batch(rng))
        r = torch.tensor(rewards)
        by_role = role_grpo_advantages(r, prompts, trajs, roles)
        differs += not torch.allclose(by_role, grpo_advantages(r, prompts, trajs, roles))
    assert differs > 5
