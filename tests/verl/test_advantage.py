"""Role-wise advantages on verl's data structures (DataProto), against hand-worked values, a slow
obviously-correct loop, the embedded backend's advantage step (parity), and verl's generic estimator
path (`compute_advantage_for_multi_trajectories` -> `compute_advantage` -> the registered estimator)."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from envace.algos import role_grpo_advantages
from envace.trainers.verl.advantage import (
    ESTIMATOR,
    apply_role_advantages,
    role_qualified_uid,
    row_key_parts,
    split_role_uid,
)
from envace.types import Role

pytestmark = pytest.mark.verl


def make_data(verl_api, rows, width=5):
    """rows: (uid, session, index, role, reward, length, scored). R sits on the last response token."""
    n = len(rows)
    rewards = torch.zeros(n, width)
    mask = torch.zeros(n, width, dtype=torch.long)
    for i, (_, _, _, _, r, length, _) in enumerate(rows):
        mask[i, :length] = 1
        rewards[i, length - 1] = r
    data = verl_api["DataProto"].from_dict(tensors={"token_level_rewards": rewards, "response_mask": mask},
                                           non_tensors={"uid": np.array([r[0] for r in rows], dtype=object)})
    keys = [f"{u}_{s}_{i}" for u, s, i, *_ in rows]
    extra = [{"role": r[3], "envace_scored": r[6]} for r in rows]
    return data, keys, extra


def per_row(data):
    """The one advantage value of each row (0 for rows without tokens), checking it is constant on the mask."""
    adv, mask = data.batch["advantages"], data.batch["response_mask"].bool()
    out = []
    for a, m in zip(adv, mask):
        vals = a[m]
        assert torch.all(a[~m] == 0)
        if len(vals):
            assert torch.allclose(vals, vals[0].expand_as(vals))
        out.append(float(vals[0]) if len(vals) else 0.0)
    return out


def test_hand_worked_example(verl_api):
    # K=2: T1 (R=1) has 2 Act rows + 1 Rehearse row, T2 (R=0) has 1 Act row + 2 Rehearse rows.
    rows = [("u", "0", 0, "act", 1.0, 3, True), ("u", "0", 1, "rehearse", 1.0, 2, True),
            ("u", "0", 2, "act", 1.0, 4, True), ("u", "1", 0, "act", 0.0, 1, True),
            ("u", "1", 1, "rehearse", 0.0, 3, True), ("u", "1", 2, "rehearse", 0.0, 2, True)]
    data, keys, extra = make_data(verl_api, rows)
    metrics = apply_role_advantages(data, keys, extra)
    # act: mu = (1+1+0)/3 = 2/3; rehearse: mu = (1+0+0)/3 = 1/3
    expected = [1 / 3, 2 / 3, 1 / 3, -2 / 3, -1 / 3, -1 / 3]
    assert per_row(data) == pytest.approx(expected, abs=1e-6)
    assert torch.equal(data.batch["returns"], data.batch["advantages"])
    direct = role_grpo_advantages([r[4] for r in rows], ["u"] * 6, ["0", "0", "0", "1", "1", "1"],
                                  [r[3] for r in rows])
    assert per_row(data) == pytest.approx(direct.tolist(), abs=1e-7)
    assert metrics["envace/rows/act"] == 3 and metrics["envace/rows/rehearse"] == 3


def slow_advantages(rows, tags, weighting):
    """Obviously correct: per (uid, role) group, mean over members of the scored, non-padding rows."""
    out = []
    for i, (uid, _sess, _, role, r, _, scored) in enumerate(rows):
        if not scored or tags[i].get("is_padding"):
            out.append(0.0)
            continue
        members = [j for j, row in enumerate(rows)
                   if row[0] == uid and row[3] == role and row[6] and not tags[j].get("is_padding")]
        if weighting == "per_output":
            values = [rows[j][4] for j in members]
        else:
            by_traj: dict[str, list[float]] = {}
            for j in members:
                by_traj.setdefault(rows[j][1], []).append(rows[j][4])
            values = [sum(v) / len(v) for v in by_traj.values()]
        out.append(r - sum(values) / len(values))
    return out


@pytest.mark.parametrize("weighting", ["per_output", "per_trajectory"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_matches_slow_loop_on_random_batches(verl_api, weighting, seed):
    rng = random.Random(seed)
    rows, tags = [], []
    for p in range(3):
        for s in range(4):
            reward = rng.choice([0.0, 0.25, 0.5, 1.0])
            scored = rng.random() > 0.15
            for i in range(rng.randint(1, 5)):
                rows.append((f"p{p}", str(s), i, rng.choice(["act", "rehearse"]), reward, rng.randint(1, 5), scored))
                tags.append({})
    for k in range(3):  # verl's synthetic padding rows: a copy of row 0's fields under a fresh uid
        rows.append((f"pad{seed}", str(k), 0, rows[0][3], 0.0, 1, True))
        tags.append({"is_padding": True})
    order = list(range(len(rows)))
    rng.shuffle(order)
    rows, tags = [rows[i] for i in order], [tags[i] for i in order]
    data, keys, extra = make_data(verl_api, rows)
    apply_role_advantages(data, keys, extra, tags, weighting=weighting)
    assert per_row(data) == pytest.approx(slow_advantages(rows, tags, weighting), abs=1e-6)


def test_parity_with_embedded_backend(verl_api):
    """Same trajectories: the embedded trainer's rows/advantages vs the verl rows of the agent loop."""
    from envace.trainers.train_rows import assign_advantages, build_rows
    from envace.trainers.verl.episode import EpisodeResult, episode_outputs
    from envace.types import Mode, Task, Trajectory, Turn

    rng = random.Random(7)
    trajs = []
    for p in range(2):
        task = Task(uuid=f"t{p}", tools=[], messages=[])
        for s in range(4):
            traj = Trajectory(task=task, prompt_index=p, sample_index=s, mode=Mode.REHEARSE,
                              reward=None if (p, s) == (1, 2) else rng.choice([0.0, 0.5, 1.0]))
            for _ in range(rng.randint(1, 6)):
                n = rng.randint(1, 4)
                traj.turns.append(Turn(role=rng.choice([Role.ACT, Role.REHEARSE]), prompt_ids=[1, 2],
                                       response_ids=list(range(3, 3 + n)), logprobs=[-0.1] * n, text="x",
                                       temperature=1.0))
            trajs.append(traj)
    emb_rows = build_rows(trajs)
    embedded = assign_advantages(emb_rows, "role_grpo", "per_output", False).tolist()

    rows = []
    for traj in trajs:
        result = EpisodeResult(traj, [], 0.0, 0.0)
        uid, session = f"uid{traj.prompt_index}", str(traj.sample_index)
        for i, out in enumerate(episode_outputs(result, trajectory_id=f"{uid}_{session}", response_length=64)):
            rows.append((uid, session, i, out.extra_fields["role"], out.reward_score, len(out.response_ids),
                         out.extra_fields["envace_scored"]))
    data, keys, extra = make_data(verl_api, rows)
    apply_role_advantages(data, keys, extra)
    assert per_row(data) == pytest.approx(embedded, abs=1e-6)


def test_generic_estimator_path(verl_api):
    """verl's own V1 helper with adv_estimator=envace_role_grpo calls the registered estimator."""
    from verl.trainer.config import AlgoConfig
    from verl.trainer.ppo.v1.utils import compute_advantage_for_multi_trajectories

    rows = [("u", "0", 0, "act", 1.0, 3, True), ("u", "0", 1, "rehearse", 1.0, 2, True),
            ("u", "0", 2, "act", 1.0, 4, True), ("u", "1", 0, "act", 0.0, 1, True),
            ("u", "1", 1, "rehearse", 0.0, 3, True), ("u", "1", 2, "rehearse", 0.0, 2, True)]
    trainer_data, keys, extra = make_data(verl_api, rows)
    apply_role_advantages(trainer_data, keys, extra)

    data, _, _ = make_data(verl_api, rows)
    data.non_tensor_batch["uid"] = np.array([role_qualified_uid(r[0], r[3]) for r in rows], dtype=object)
    out = compute_advantage_for_multi_trajectories(data, batch_keys=keys, adv_estimator=ESTIMATOR,
                                                   config=AlgoConfig(norm_adv_by_std_in_grpo=False))
    assert torch.allclose(out.batch["advantages"], trainer_data.batch["advantages"], atol=1e-6)

    # an unqualified uid: one group per prompt, i.e. verl's GRPO without std (groups of size >= 2)
    plain, _, _ = make_data(verl_api, rows)
    ours = compute_advantage_for_multi_trajectories(plain, batch_keys=keys, adv_estimator=ESTIMATOR,
                                                    config=AlgoConfig(norm_adv_by_std_in_grpo=False))
    theirs, _ = verl_api["core_algos"].compute_grpo_outcome_advantage(
        plain.batch["token_level_rewards"], plain.batch["response_mask"], plain.non_tensor_batch["uid"],
        norm_adv_by_std_in_grpo=False)
    assert torch.allclose(ours.batch["advantages"], theirs, atol=1e-6)
    assert verl_api["core_algos"].get_adv_estimator_fn(ESTIMATOR).__name__ == "compute_envace_role_grpo_advantage"


def test_uid_and_key_helpers():
    assert split_role_uid(role_qualified_uid("abc-1", Role.REHEARSE)) == ("abc-1", "rehearse")
    assert split_role_uid("abc-1") == ("abc-1", "act")
    assert row_key_parts("3f2a-9c_1_12") == ("3f2a-9c", "1", 12)
    with pytest.raises(ValueError, match="uid.*session.*index"):
        row_key_parts("no-index-here")


def test_row_without_role_names_the_fix(verl_api):
    data, keys, extra = make_data(verl_api, [("u", "0", 0, "act", 1.0, 2, True), ("u", "1", 0, "act", 0.0, 2, True)])
    extra[1] = {}
    with pytest.raises(ValueError, match=r"u_1_0.*envace_agent.*adv_estimator=grpo"):
        apply_role_advantages(data, keys, extra)
