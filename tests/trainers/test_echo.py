"""The echo arm (envace.trainers.arms.echo): env-mode GRPO plus cross-entropy on the real answers as Rehearse
targets. The targets are the real answers under the very prompt a rehearse-mode episode builds (checked
against a rehearse-mode run whose Rehearse seat is the oracle, which sees the same history); echo_coef=0 is
bit-identical to plain GRPO; echo_coef>0 adds coef x the token-mean NLL, checked against a per-row loop."""

from __future__ import annotations

import copy
import json

import pytest
import torch
from scripted_episodes import ScriptedAct, plan

from envace.algos import grpo_advantages
from envace.config import RolloutConfig, SamplingConfig
from envace.execution_result import parse_execution_result, render_execution_result
from envace.models.loading import load_policy
from envace.rollout import run_rollout
from envace.rollout.oracle import OracleRehearser
from envace.trainers.arms.echo import echo_rows
from envace.trainers.config import TrainConfig
from envace.trainers.train_rows import ExtraRows, TrainRow
from envace.trainers.update import policy_update
from envace.types import Mode, Role
from envace.worlds.environment import WorldEnvironment
from envace.worlds.generator import generate_tasks

END = "<|im_end|>"


@pytest.fixture(scope="module")
def world():
    from envace.models.corpus import task_strings
    from envace.models.tokenizer import train_tokenizer

    tasks = generate_tasks(6, "train", 0)
    tok = train_tokenizer([s for t in tasks for s in task_strings(t)], vocab_size=1024)
    return tasks, tok


def _cfg() -> RolloutConfig:
    return RolloutConfig(act=SamplingConfig(max_new_tokens=200), rehearse=SamplingConfig(max_new_tokens=200),
                         max_assistant_turns=6, max_context_tokens=4096, rehearse_style="full")


@pytest.mark.parametrize("kind", ["gold", "errors", "twice"])
def test_echo_targets_are_the_real_answers_under_the_rehearse_mode_prompt(world, kind):
    tasks, tok = world
    n_echo = 0
    for i, task in enumerate(tasks[:4]):
        act = ScriptedAct(tok, plan(task, kind))
        (env,) = run_rollout([task], k=1, policy=act, cfg=_cfg(), mode=Mode.ENV, env_factory=WorldEnvironment,
                             seed=i, echo_prompts=True)
        oracle = {Role.ACT: act, Role.REHEARSE: OracleRehearser(tok, [task], WorldEnvironment)}
        (reh,) = run_rollout([task], k=1, policy=oracle, cfg=_cfg(), mode=Mode.REHEARSE, seed=i)
        rehearsed = reh.turns_of(Role.REHEARSE)
        rows = echo_rows([env], tok)
        # one target per executed call, each under the prompt rehearse mode built for the same call
        assert len(rows) == len(env.echo) == len(rehearsed) == env.env_calls > 0
        assert [r.prompt_ids for r in rows] == [u.prompt_ids for u in rehearsed]
        assert [e.call for e in env.echo] == [u.call for u in rehearsed]
        real_tool_texts = [m.content for m in env.messages if m.role == "tool" and m.name is not None]
        assert len(real_tool_texts) == len(rows)
        for row, real_text, u in zip(rows, real_tool_texts, rehearsed):
            decoded = tok.decode(row.response_ids, skip_special_tokens=False)
            assert decoded.endswith(END)
            body = decoded[: -len(END)]
            # the target is the real environment's answer, as the tool message Act saw it
            assert body == render_execution_result(json.loads(real_text))
            assert parse_execution_result(body).content == json.loads(real_text)
            assert body == u.text  # what a perfect Rehearse (the oracle) wrote for that prompt
            assert row.role is Role.REHEARSE and row.temperature == 1.0
        n_echo += len(rows)
        # recording echo prompts changes nothing the episode shows or decides
        (plain,) = run_rollout([task], k=1, policy=act, cfg=_cfg(), mode=Mode.ENV, env_factory=WorldEnvironment,
                               seed=i)
        assert plain.messages == env.messages and plain.echo == []
        assert [u.response_ids for u in plain.turns] == [u.response_ids for u in env.turns]
    assert n_echo > 4


def test_echo_needs_env_mode():
    with pytest.raises(ValueError, match="algo.echo_coef.*rollout.mode=env"):
        TrainConfig(model="x", algo={"echo_coef": 0.1})
    with pytest.raises(ValueError, match="algo.echo_coef"):
        TrainConfig(model="x", rollout={"mode": "simulator", "simulator_model": "y"}, algo={"echo_coef": 0.1})
    assert TrainConfig(model="x", rollout={"mode": "env"}, algo={"echo_coef": 0.1}).algo.echo_coef == 0.1
    with pytest.raises(ValueError, match="echo_prompts"):
        run_rollout([], k=1, policy=object(), cfg=_cfg(), mode=Mode.REHEARSE, echo_prompts=True)


# ----- the update ---------------------------------------------------------------------------------------


def _grpo_rows(role_rows):
    rows = copy.deepcopy([r for r in role_rows if r.role is Role.ACT])
    adv = grpo_advantages(torch.tensor([r.reward for r in rows]), [r.prompt_index for r in rows],
                          [r.trajectory_key for r in rows], [r.role for r in rows])
    for r, a in zip(rows, adv.tolist()):
        r.advantage = a
    return rows


def _echo(role_rows):
    """Supervised Rehearse rows: the Rehearse prompts of the fixture, each with a target of its own length."""
    out = []
    for i, r in enumerate(r for r in role_rows if r.role is Role.REHEARSE):
        target = [(7 * i + 3 * j) % 600 + 5 for j in range(3 + i % 4)]
        out.append(TrainRow.standalone(role=Role.REHEARSE, prompt_ids=r.prompt_ids, response_ids=target,
                                       old_logprobs=[0.0] * len(target), temperature=1.0,
                                       prompt_index=r.prompt_index, trajectory_key=r.trajectory_key, reward=0.0))
    return out


def slow_nll(model, rows) -> torch.Tensor:
    """Token-mean NLL of the targets, one full forward per row, log-softmax over the whole vocabulary."""
    total, n = 0.0, 0
    for r in rows:
        ids = torch.tensor([r.prompt_ids + r.response_ids])
        logits = model(ids).logits[0].float()
        for j, tok in enumerate(r.response_ids):
            pos = len(r.prompt_ids) - 1 + j
            total = total - torch.log_softmax(logits[pos], dim=-1)[tok]
            n += 1
    return total / n


def _update(model_dir, rows, echo, coef, opt="adamw", **algo):
    model, tok = load_policy(model_dir)
    optim = (torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.0) if opt == "adamw"
             else torch.optim.SGD(model.parameters(), lr=1.0))
    cfg = TrainConfig(model="x", rollout={"mode": "env"}, algo={"advantage": "grpo", **algo}).algo
    res = policy_update(model, optim, copy.deepcopy(rows), cfg, pad_id=tok.pad_token_id, micro_batch=3,
                        grad_clip=1e9, extra=[ExtraRows("echo", copy.deepcopy(echo or []), coef)])
    return model, res


def test_echo_coef_zero_is_bit_identical_to_plain_grpo(tiny_model_dir, role_rows):
    rows, echo = _grpo_rows(role_rows), _echo(role_rows)
    plain, res_plain = _update(tiny_model_dir, rows, None, 0.0)
    zero, res_zero = _update(tiny_model_dir, rows, echo, 0.0)
    assert res_zero.loss == res_plain.loss and res_zero.grad_norm == res_plain.grad_norm
    assert "echo_nll" not in res_zero.metrics
    for (n, a), (_, b) in zip(plain.named_parameters(), zero.named_parameters()):
        assert torch.equal(a, b), n


@pytest.mark.parametrize("mini_batches", [1, 2])
def test_echo_loss_is_grpo_loss_plus_coef_times_the_nll(tiny_model_dir, role_rows, mini_batches):
    coef = 0.3
    rows, echo = _grpo_rows(role_rows), _echo(role_rows)
    start, _ = load_policy(tiny_model_dir)
    nll = slow_nll(start, echo)
    grads = torch.autograd.grad(nll, list(start.parameters()))
    before = {n: p.detach().clone() for n, p in start.named_parameters()}
    plain, res_plain = _update(tiny_model_dir, rows, None, 0.0, opt="sgd", ppo_mini_batches=mini_batches)
    with_echo, res = _update(tiny_model_dir, rows, echo, coef, opt="sgd", ppo_mini_batches=mini_batches)
    if mini_batches == 1:
        assert res.loss == pytest.approx(res_plain.loss + coef * float(nll), abs=1e-5)
        assert res.metrics["echo_nll"] == pytest.approx(float(nll), abs=1e-5)
        # SGD at lr 1, no clipping: the parameter change differs from plain GRPO's by -coef x grad(NLL)
        for (n, p), (_, q), g in zip(with_echo.named_parameters(), plain.named_parameters(), grads):
            torch.testing.assert_close((p - before[n]) - (q - before[n]), -coef * g, atol=1e-5, rtol=1e-4)
    else:  # two optimizer steps: each adds coef x the token-mean NLL of its own chunk of echo rows
        first = [s.extra["echo"] for s in res.steps if "echo" in s.extra]  # (nll, tokens) per optimizer step
        assert sum(t for _, t in first) == sum(len(r.response_ids) for r in echo)
        assert "echo" in res.steps[0].extra
        assert res.metrics["echo_nll"] == pytest.approx(sum(n * t for n, t in first) / sum(t for _, t in first))
        assert [s.tokens for s in res.steps] == [s.tokens for s in res_plain.steps]  # the GRPO mini-batches


def test_echo_rows_alone_train_the_rehearse_model(tiny_model_dir, role_rows):
    """Per-role policy in env mode: the Rehearse model has no GRPO rows, only echo rows; it still updates."""
    echo = _echo(role_rows)
    start, _ = load_policy(tiny_model_dir)
    nll = float(slow_nll(start, echo))
    model, res = _update(tiny_model_dir, [], echo, 1.0, opt="sgd")
    assert res.metrics["optimizer_steps"] == 1.0
    assert res.loss == pytest.approx(nll, abs=1e-5)
    assert any(not torch.equal(p, q) for p, q in zip(model.parameters(), start.parameters()))


# ----- the coefficient ----------------------------------------------------------------------------------


@pytest.mark.parametrize("w", [0.01, 0.05, 0.1])
def test_the_echo_term_scales_exactly_with_the_configured_coefficient(tiny_model_dir, role_rows, w):
    """At algo.echo_coef = w the loss is the unchanged GRPO loss plus w x the weight-1 echo term, and so is the
    gradient (SGD at lr 1 without clipping: each parameter moves by -gradient); the weight-1 term is the slow
    per-row token-mean NLL."""
    coef = TrainConfig(model="x", rollout={"mode": "env"}, algo={"echo_coef": w}).algo.echo_coef
    assert coef == w
    rows, echo = _grpo_rows(role_rows), _echo(role_rows)
    start, _ = load_policy(tiny_model_dir)
    nll = slow_nll(start, echo)
    g_nll = torch.cat([g.reshape(-1) for g in torch.autograd.grad(nll, list(start.parameters()))])
    nll = float(nll.detach())

    def flat(model):
        return torch.cat([p.detach().reshape(-1) for p in model.parameters()])

    before = flat(start)
    grpo, res_0 = _update(tiny_model_dir, rows, None, 0.0, opt="sgd")
    unit, res_1 = _update(tiny_model_dir, rows, echo, 1.0, opt="sgd")
    at_w, res_w = _update(tiny_model_dir, rows, echo, coef, opt="sgd")
    assert res_1.loss - res_0.loss == pytest.approx(nll, abs=1e-5)  # the weight-1 term
    assert res_w.loss == pytest.approx(res_0.loss + w * (res_1.loss - res_0.loss), abs=1e-6)
    assert res_w.metrics["echo_nll"] == pytest.approx(nll, abs=1e-5)  # the term itself does not scale
    step_0, step_1, step_w = flat(grpo) - before, flat(unit) - before, flat(at_w) - before
    echo_step = step_w - step_0  # what the echo term added to the GRPO step
    for want in (w * (step_1 - step_0), -w * g_nll):
        assert float((echo_step - want).norm()) <= 1e-3 * float(want.norm())


@pytest.mark.parametrize("bad", [-0.01, 1.5, float("nan"), float("inf")])
def test_echo_coef_outside_its_range_is_refused_with_the_fix(bad):
    with pytest.raises(ValueError, match=r"algo.echo_coef=.* is outside \[0, 1\].*set algo.echo_coef between 0 and 1"):
        TrainConfig(model="x", rollout={"mode": "env"}, algo={"echo_coef": bad})


def test_the_knobs_sweep_sets_each_echo_coefficient():
    from pathlib import Path

    from envace.config import load_config
    from envace.sweeps.cells import resolve_cell_config
    from envace.sweeps.grid import SweepConfig, expand_cells

    sweep = Path(__file__).resolve().parents[2] / "configs/sweeps/world_model_knobs.yaml"
    cells = [c for c in expand_cells(load_config(SweepConfig, sweep)) if c.kind == "train"]
    resolved = {c.name: resolve_cell_config(c) for c in cells}  # every cell's config validates
    coefs = {(c.algo.echo_coef, c.algo.advantage, c.rollout.mode) for c in resolved.values()}
    assert coefs == {(0.0, "grpo", "env"), (0.01, "grpo", "env"), (0.05, "grpo", "env"), (0.1, "grpo", "env"),
                     (0.0, "role_grpo", "rehearse"), (0.0, "role_moving_average", "rehearse")}
    assert len({(c.model, c.steps, c.prompts_per_step, c.k, c.optim.lr) for c in resolved.values()}) == 1
