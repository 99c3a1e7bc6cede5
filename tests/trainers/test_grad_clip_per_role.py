"""Per-role gradient clipping for the shared policy (`optim.grad_clip_per_role`): the update equals, on
SGD with lr 1, minus the sum of each role's own gradient clipped to `grad_clip` — each role's gradient
taken independently as the unclipped update with the other role's advantages set to 0. Through the trainer
(`update_models` with the config flag): the per-role norms and the update match a row-by-row hand computation
(conftest's `hand_role_grads`), and with the flag off the one joint norm is clipped."""

from __future__ import annotations

import copy

import torch

from envace.algos import role_grpo_advantages
from envace.models.loading import load_policy
from envace.trainers.config import TrainConfig
from envace.trainers.embedded import _Policy, update_models
from envace.trainers.update import policy_update
from envace.types import Role


def _rows(role_rows, zero=None):
    rows = copy.deepcopy(role_rows)
    adv = role_grpo_advantages(torch.tensor([r.reward for r in rows]), [r.prompt_index for r in rows],
                               [r.trajectory_key for r in rows], [r.role for r in rows])
    for r, a in zip(rows, adv.tolist()):
        r.advantage = 0.0 if r.role is zero else a
    return rows


def _step(model_dir, rows, clip, per_role):
    model, tok = load_policy(model_dir)
    start = torch.cat([p.detach().flatten() for p in model.parameters()])
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    res = policy_update(model, opt, rows, TrainConfig(model="x").algo, pad_id=tok.pad_token_id, micro_batch=4,
                        grad_clip=clip, clip_per_role=per_role)
    return start - torch.cat([p.detach().flatten() for p in model.parameters()]), res


def test_each_role_is_clipped_on_its_own(tiny_model_dir, role_rows):
    g_act, _ = _step(tiny_model_dir, _rows(role_rows, zero=Role.REHEARSE), 1e9, False)
    g_reh, _ = _step(tiny_model_dir, _rows(role_rows, zero=Role.ACT), 1e9, False)
    clip = 0.5 * min(float(g_act.norm()), float(g_reh.norm()))  # both roles get clipped
    expected = sum(g * min(1.0, clip / float(g.norm())) for g in (g_act, g_reh))
    got, res = _step(tiny_model_dir, _rows(role_rows), clip, True)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-4)
    global_clip, _ = _step(tiny_model_dir, _rows(role_rows), clip, False)  # one clip over both: another update
    assert not torch.allclose(global_clip, expected, atol=1e-5, rtol=1e-4)
    assert res.role_metrics["act"]["grad_norm"] > clip and res.role_metrics["rehearse"]["grad_norm"] > clip


def test_the_config_flag_reaches_the_update(tiny_model_dir, role_rows, hand_role_grads):
    rows = _rows(role_rows)
    model, _ = load_policy(tiny_model_dir, device="cpu")
    g = {role.value: v.float() for role, v in hand_role_grads(model, rows).items()}
    norms = {role: float(v.norm()) for role, v in g.items()}
    clip = 0.5 * min(norms.values())  # each role is clipped, and so is their sum
    joint = g["act"] + g["rehearse"]
    want = {True: sum(v * min(1.0, clip / (norms[role] + 1e-6)) for role, v in g.items()),
            False: joint * min(1.0, clip / (float(joint.norm()) + 1e-6))}
    assert not torch.allclose(want[True], want[False], atol=1e-5, rtol=1e-3)
    for per_role in (True, False):
        cfg = TrainConfig(model=str(tiny_model_dir), optim={"grad_clip": clip, "grad_clip_per_role": per_role})
        policy = _Policy(cfg, {"policy": tiny_model_dir}, torch.device("cpu"))
        policy.optimizers = {"policy": torch.optim.SGD(policy.models["policy"].parameters(), lr=1.0)}
        start = torch.cat([p.detach().flatten().clone() for p in policy.models["policy"].parameters()])
        res = update_models(policy, rows, cfg)["policy"]
        got = start - torch.cat([p.detach().flatten() for p in policy.models["policy"].parameters()])
        torch.testing.assert_close(got, want[per_role], atol=2e-6, rtol=1e-3)
        torch.testing.assert_close(res.grad_norm, float(joint.norm()), rtol=1e-3, atol=0)  # pre-clip, either way
        for role in ("act", "rehearse"):  # per-role norms are read (and logged) only when each role is clipped
            if per_role:
                torch.testing.assert_close(res.role_metrics[role]["grad_norm"], norms[role], rtol=1e-3, atol=0)
            else:
                assert "grad_norm" not in res.role_metrics[role]
