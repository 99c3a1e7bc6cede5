"""The per-role moving-average baseline (envace.algos.moving_baseline): three steps worked by hand, the
first-step and new-role rules, unscored rows, the estimator's registration and errors, and the holder
against a slow plain-Python loop over seeded multi-step runs."""

from __future__ import annotations

import json
import math
import random
import statistics

import pytest
import torch

from envace.algos import (
    ADVANTAGES,
    RoleMovingBaseline,
    carries_baseline,
    get_advantage_fn,
    grpo_advantages,
    role_grpo_advantages,
    role_moving_average_advantages,
)
from envace.algos.moving_baseline import ema_update, role_batch_means
from envace.types import Role

ACT, REH = Role.ACT, Role.REHEARSE
NAN = float("nan")


def _columns(rows):
    prompts, trajs, roles, rewards = zip(*rows)
    return torch.tensor(rewards, dtype=torch.float32), list(prompts), list(trajs), list(roles)


# Three steps, decay 0.9, per_output. Rows are (prompt, trajectory, role, reward); every row of a trajectory
# carries its reward. Step 1: trajectories a (R=1), b (R=0), c (R=0.5).
STEP1 = [("x", "a", ACT, 1.0), ("x", "a", ACT, 1.0), ("x", "b", ACT, 0.0), ("y", "c", ACT, 0.5),
         ("x", "a", REH, 1.0), ("x", "b", REH, 0.0), ("x", "b", REH, 0.0)]
# Step 2: d (R=0.2), e (R=0.8).
STEP2 = [("z", "d", ACT, 0.2), ("z", "e", ACT, 0.8), ("z", "d", REH, 0.2)]
# Step 3: f (R=1), g unscored; the only Rehearse row is g's.
STEP3 = [("w", "f", ACT, 1.0), ("w", "g", ACT, NAN), ("w", "g", REH, NAN)]

# By hand:
# step 1: no earlier steps, so each role's batch mean: b_act = (1+1+0+0.5)/4 = 0.625, b_reh = (1+0+0)/3 = 1/3
#   A = [0.375, 0.375, -0.625, -0.125 | 2/3, -1/3, -1/3]; then b_act = 0.625, b_reh = 1/3 (the average starts)
# step 2: A uses the step-1 baselines: [0.2-0.625, 0.8-0.625 | 0.2-1/3] = [-0.425, 0.175 | -2/15]
#   then b_act = 0.9*0.625 + 0.1*0.5 = 0.6125, b_reh = 0.9*(1/3) + 0.1*0.2 = 0.32
# step 3: A = [1-0.6125, 0 (unscored) | 0 (unscored)] = [0.3875, 0, 0]
#   then b_act = 0.9*0.6125 + 0.1*1.0 = 0.65125; Rehearse had no scored row: b_reh stays 0.32
HAND = [
    ([0.375, 0.375, -0.625, -0.125, 2 / 3, -1 / 3, -1 / 3], {"act": 0.625, "rehearse": 1 / 3}),
    ([-0.425, 0.175, -2 / 15], {"act": 0.6125, "rehearse": 0.32}),
    ([0.3875, 0.0, 0.0], {"act": 0.65125, "rehearse": 0.32}),
]
HAND_USED = [{"act": 0.625, "rehearse": 1 / 3}, {"act": 0.625, "rehearse": 1 / 3}, {"act": 0.6125}]


def test_three_steps_by_hand():
    holder = RoleMovingBaseline(decay=0.9)
    fn = get_advantage_fn("role_moving_average")
    for rows, (want_adv, want_state), want_used in zip((STEP1, STEP2, STEP3), HAND, HAND_USED):
        adv = holder.advantages(fn, *_columns(rows))
        assert adv.dtype == torch.float32 and adv.tolist() == pytest.approx(want_adv, abs=1e-6)
        assert holder.values == pytest.approx(want_state, abs=1e-6)
        assert holder.used == pytest.approx(want_used, abs=1e-6)
    assert holder.metrics() == pytest.approx({"baseline/act": 0.6125}, abs=1e-6)


def test_the_pure_parts_by_hand():
    r, p, t, roles = _columns(STEP1)
    assert role_batch_means(r, p, t, roles) == pytest.approx({"act": 0.625, "rehearse": 1 / 3})
    # per_trajectory: each trajectory once per role: act {a: 1, b: 0, c: 0.5}, rehearse {a: 1, b: 0}
    assert role_batch_means(r, p, t, roles, weighting="per_trajectory") == pytest.approx({"act": 0.5,
                                                                                          "rehearse": 0.5})
    assert ema_update({"act": 1.0}, {"act": 0.0, "rehearse": 0.4}, 0.75) == {"act": 0.75, "rehearse": 0.4}
    assert ema_update({"act": 1.0, "rehearse": 0.2}, {}, 0.5) == {"act": 1.0, "rehearse": 0.2}
    assert ema_update({"act": 1.0}, {"act": 0.0}, 0.0) == {"act": 0.0}  # decay 0: the last step's mean
    # a carried baseline is used as given; a role missing from it falls back to its batch mean
    adv = role_moving_average_advantages(r, p, t, roles, baseline={"act": 0.5})
    assert adv.tolist() == pytest.approx([0.5, 0.5, -0.5, 0.0, 2 / 3, -1 / 3, -1 / 3], abs=1e-6)
    assert role_moving_average_advantages(r, p, t, roles, baseline={ACT: 0.5}).tolist() == adv.tolist()


def test_norm_std_divides_by_the_batch_std_of_the_role():
    r, p, t, roles = _columns(STEP1)
    adv = role_moving_average_advantages(r, p, t, roles, baseline={"act": 0.0, "rehearse": 0.0}, norm_std=True,
                                         eps=0.0)
    s_act, s_reh = statistics.stdev([1.0, 1.0, 0.0, 0.5]), statistics.stdev([1.0, 0.0, 0.0])
    want = [1 / s_act, 1 / s_act, 0.0, 0.5 / s_act, 1 / s_reh, 0.0, 0.0]
    assert adv.tolist() == pytest.approx(want, abs=1e-6)
    # off by default: the raw difference
    plain = role_moving_average_advantages(r, p, t, roles, baseline={"act": 0.0, "rehearse": 0.0})
    assert plain.tolist() == pytest.approx([1.0, 1.0, 0.0, 0.5, 1.0, 0.0, 0.0])


def test_a_role_first_seen_later_starts_from_its_own_batch_mean():
    holder = RoleMovingBaseline(decay=0.5)
    fn = get_advantage_fn("role_moving_average")
    holder.advantages(fn, *_columns([("x", 0, ACT, 1.0), ("x", 1, ACT, 0.0)]))  # env mode: no Rehearse rows
    assert holder.values == {"act": 0.5}
    adv = holder.advantages(fn, *_columns([("x", 0, ACT, 1.0), ("x", 0, REH, 1.0), ("x", 1, REH, 0.0)]))
    assert adv.tolist() == pytest.approx([0.5, 0.5, -0.5])
    assert holder.values == {"act": 0.75, "rehearse": 0.5}


def test_registered_with_the_family_signature():
    fn = get_advantage_fn("role_moving_average")
    assert fn is role_moving_average_advantages and "role_moving_average" in ADVANTAGES
    assert carries_baseline(fn) and not carries_baseline(role_grpo_advantages) and not carries_baseline(
        grpo_advantages)
    # without a carried baseline (or on an empty batch) it is one step's own batch mean per role
    r, p, t, roles = _columns(STEP1)
    assert fn(r, p, t, roles).tolist() == pytest.approx(HAND[0][0], abs=1e-6)
    assert fn(torch.zeros(0), [], [], []).shape == (0,)
    # the GRPO estimators accept `baseline` and ignore it: their baseline is the group's own mean
    assert torch.equal(role_grpo_advantages(r, p, t, roles, baseline={"act": 9.0}), role_grpo_advantages(r, p, t,
                                                                                                         roles))


@pytest.mark.parametrize(("call", "match"), [
    (lambda: RoleMovingBaseline(decay=1.0), r"decay=1.0 must be a number in \[0, 1\)"),
    (lambda: RoleMovingBaseline(decay=-0.1), "decay=-0.1"),
    (lambda: RoleMovingBaseline(decay=True), "decay=True"),
    (lambda: role_moving_average_advantages([1.0], ["x"], [0], [ACT], baseline={"critic": 0.0}),
     "key 'critic', not a role.*act, rehearse"),
    (lambda: role_moving_average_advantages([1.0], ["x"], [0], [ACT], baseline={"act": NAN}),
     r"baseline\['act'\]=nan is not a finite number"),
    (lambda: role_moving_average_advantages([1.0], ["x"], [0], [ACT], weighting="per_token"), "per_token"),
    (lambda: RoleMovingBaseline().load_state_dict({"act": 0.1}, "ckpt/meta.json"),
     r"ckpt/meta.json: a role baseline state is \{'decay'"),
])
def test_bad_input_errors(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_state_round_trips_through_json_exactly():
    holder = RoleMovingBaseline(decay=0.9)
    fn = get_advantage_fn("role_moving_average")
    for rows in (STEP1, STEP2):
        holder.advantages(fn, *_columns(rows))
    restored = RoleMovingBaseline(decay=0.9)
    restored.load_state_dict(json.loads(json.dumps(holder.state_dict())))
    assert restored.values == holder.values  # bit for bit: JSON keeps a float's repr
    assert torch.equal(restored.advantages(fn, *_columns(STEP3)), holder.advantages(fn, *_columns(STEP3)))
    assert restored.values == holder.values


# ---- slow, obviously correct reference -------------------------------------------------------------------


def _slow_run(batches, decay, weighting, norm_std, eps=1e-6):
    """Every step in plain Python floats: each role's members, then A = R - b (b from earlier steps, else the
    step's mean), then b moves. Returns each step's advantages and the final baselines."""
    b: dict = {}
    out = []
    for rows in batches:
        members: dict = {}
        for prompt, traj, role, reward in rows:
            if not math.isnan(reward):
                members.setdefault(Role(role).value, {}).setdefault((prompt, traj), []).append(reward)
        values = {role: ([x for v in by_traj.values() for x in v] if weighting == "per_output"
                         else [statistics.fmean(v) for v in by_traj.values()])
                  for role, by_traj in members.items()}
        adv = []
        for _prompt, _traj, role, reward in rows:
            role = Role(role).value
            if math.isnan(reward):
                adv.append(0.0)
                continue
            a = reward - b.get(role, statistics.fmean(values[role]))
            if norm_std:
                vs = values[role]
                a = a / ((statistics.stdev(vs) if len(vs) >= 2 else 1.0) + eps)
            adv.append(a)
        for role, vs in values.items():
            m = statistics.fmean(vs)
            b[role] = decay * b[role] + (1 - decay) * m if role in b else m
        out.append(adv)
    return out, b


def _random_step(rng: random.Random):
    rows = []
    for p in range(rng.randint(1, 4)):
        for k in range(rng.randint(1, 4)):
            reward = rng.choice([0.0, 1.0, round(rng.random(), 3)])
            unscored = rng.random() < 0.1
            for role in (ACT, REH):
                if rng.random() < 0.2:
                    continue  # a role may be absent from a trajectory (or from the whole step)
                for _ in range(rng.randint(1, 3)):
                    rows.append((f"s{p}", k, role if rng.random() < 0.5 else role.value, NAN if unscored else reward))
    rng.shuffle(rows)
    return rows or [("s0", 0, ACT, 1.0)]


@pytest.mark.parametrize("weighting", ["per_output", "per_trajectory"])
@pytest.mark.parametrize("norm_std", [False, True])
def test_holder_matches_the_slow_loop_over_many_steps(weighting, norm_std):
    rng = random.Random(f"ema-{weighting}-{norm_std}")
    fn = get_advantage_fn("role_moving_average")
    for _ in range(15):
        decay = rng.choice([0.0, 0.5, 0.9, 0.99])
        batches = [_random_step(rng) for _ in range(rng.randint(1, 6))]
        # the reference sees the same float32-rounded rewards the estimator sees
        batches = [[(p, t, r, float(torch.tensor(x, dtype=torch.float32))) for p, t, r, x in rows] for rows in batches]
        want, want_b = _slow_run(batches, decay, weighting, norm_std)
        holder = RoleMovingBaseline(decay=decay)
        for rows, w in zip(batches, want):
            got = holder.advantages(fn, *_columns(rows), weighting=weighting, norm_std=norm_std)
            assert got.tolist() == pytest.approx(w, abs=1e-5, rel=1e-5)
        assert holder.values == pytest.approx(want_b, abs=1e-9)
