"""Training arms as registered hooks (envace.trainers.arms): a new arm made by the docs/extending.md recipe (one
class, one registration) changes a real embedded training step as its hooks say; the loop calls every hook of
every configured arm, in the documented order; the built-in arms are turned on by their historical config keys;
bad `arms:` entries are one-line errors; the verl backend's refusals are worded from the arms' own reasons."""

from __future__ import annotations

import math

import pytest

from envace.trainers.arms import ARMS
from envace.trainers.arms.base import EMBEDDED_ONLY, Arm, SampledBatch, StepContext, build_arms
from envace.trainers.config import TrainConfig
from envace.trainers.embedded import train
from envace.trainers.train_rows import ExtraRows, TrainRow
from envace.types import Role

# ----- the recipe's arm (docs/extending.md, "A new training arm"), word for word ----------------------------


def overlong_penalty(length: int, cap: int, buffer: int) -> float:
    """DAPO's soft overlong punishment: 0 up to cap - buffer tokens, then linear down to -1 at the cap."""
    return min(0.0, (cap - buffer - length) / buffer) if length <= cap else -1.0


class OverlongArm(Arm):
    """Every row's reward gets the soft overlong punishment of its role's token cap (DAPO, §3.4)."""

    buffer = 4

    def on_rows(self, ctx: StepContext, rows: list[TrainRow]) -> None:
        caps = {Role.ACT: ctx.cfg.rollout.act.max_new_tokens, Role.REHEARSE: ctx.cfg.rollout.rehearse.max_new_tokens}
        self.penalty = {role: [] for role in caps}
        for r in rows:
            if not math.isnan(r.reward):
                p = overlong_penalty(len(r.response_ids), caps[r.role], self.buffer)
                r.reward += p
                self.penalty[r.role].append(p)

    def metrics(self, ctx: StepContext, updates: dict) -> dict[str, float]:
        return {f"overlong/{role.value}_penalty": sum(ps) / len(ps) for role, ps in self.penalty.items() if ps}


ARMS.add("overlong", OverlongArm)  # the registration line (in the project: ARMS.add_lazy in arms/__init__.py)

# ----- a recording arm: every hook, what it saw --------------------------------------------------------------

HOOKS = ["before_rollout", "sample", "on_batch", "on_rows", "on_advantages", "extra_rows", "metrics"]


class RecorderArm(Arm):
    """Records each hook call; draws the batch itself, adds an extra row set and a metric."""

    runs: list[RecorderArm] = []

    def __init__(self, cfg):
        super().__init__(cfg)
        self.calls: list[tuple[int, str]] = []
        self.seen: dict[str, object] = {}
        RecorderArm.runs.append(self)

    def before_rollout(self, ctx):
        self.calls.append((ctx.step, "before_rollout"))
        return {"echo_prompts": False}  # a real run_rollout option

    def sample(self, ctx, tasks, rollout):
        self.calls.append((ctx.step, "sample"))
        trajs = rollout(tasks, 0, ctx.cfg.seed)
        self.seen["batch"] = SampledBatch(kept=trajs, generated=trajs, groups_generated=len(tasks),
                                          kept_prompt_indices=list(range(len(tasks))))
        return self.seen["batch"]

    def on_batch(self, ctx):
        self.calls.append((ctx.step, "on_batch"))
        self.seen["batch_seen"] = ctx.batch

    def on_rows(self, ctx, rows):
        self.calls.append((ctx.step, "on_rows"))
        self.seen["advantages_before"] = [r.turn.advantage for r in rows]
        self.seen["rows"] = rows

    def on_advantages(self, ctx, rows):
        self.calls.append((ctx.step, "on_advantages"))
        self.seen["advantages_after"] = [r.turn.advantage for r in rows]

    def extra_rows(self, ctx):
        self.calls.append((ctx.step, "extra_rows"))
        act = [r for r in self.seen["rows"] if r.role is Role.ACT][:2]
        target = [TrainRow.standalone(role=Role.ACT, prompt_ids=list(r.prompt_ids),
                                      response_ids=list(r.response_ids), old_logprobs=[0.0] * len(r.response_ids),
                                      temperature=1.0, prompt_index=r.prompt_index, trajectory_key=r.trajectory_key,
                                      reward=0.0) for r in act]
        return [ExtraRows("recorder", target, 0.5, Role.ACT)]

    def metrics(self, ctx, updates):
        self.calls.append((ctx.step, "metrics"))
        return {"recorder/hooks": float(len(self.calls))}


ARMS.add("recorder", RecorderArm)


def _cfg(model_dir, out_dir, **kw):
    return TrainConfig.model_validate(dict(
        model=str(model_dir), out_dir=str(out_dir), steps=1, prompts_per_step=2, k=2, save_every=1, threads=1,
        progress=False, data={"n_tasks": 20}, tracking={"enabled": False}, shadow_monitor=False,
        rollout={"max_assistant_turns": 2, "act": {"max_new_tokens": 16}, "rehearse": {"max_new_tokens": 16}}) | kw)


def test_the_recipe_arm_shapes_the_rewards_of_a_real_training_step(tiny_model_dir, tmp_path):
    plain = train(_cfg(tiny_model_dir, tmp_path / "plain")).history[0]
    shaped = train(_cfg(tiny_model_dir, tmp_path / "shaped", arms=["overlong"])).history[0]
    assert plain["reward/mean"] == shaped["reward/mean"]  # the same rollouts: the arm acts on rows only
    assert shaped["act/rows"] > 0 and "overlong/act_penalty" not in plain
    penalty = shaped["overlong/act_penalty"]
    assert -1.0 <= penalty < 0.0  # the tiny model writes to the cap: its Act rows are punished
    # the logged Act-row reward is the task reward plus the arm's mean penalty
    assert shaped["act/reward"] == pytest.approx(plain["act/reward"] + penalty, abs=1e-9)


@pytest.mark.parametrize(("length", "want"), [(10, 0.0), (12, 0.0), (13, -0.25), (15, -0.75), (16, -1.0),
                                              (17, -1.0)])
def test_the_recipe_penalty_by_hand(length, want):
    assert overlong_penalty(length, cap=16, buffer=4) == want


def test_the_loop_calls_every_hook_of_every_arm_in_order(tiny_model_dir, tmp_path):
    RecorderArm.runs.clear()
    res = train(_cfg(tiny_model_dir, tmp_path / "rec", steps=2, arms=["recorder", "overlong"]))
    (arm,) = RecorderArm.runs
    assert arm.calls == [(step, hook) for step in (1, 2) for hook in HOOKS]
    assert arm.seen["batch_seen"] is arm.seen["batch"]  # the batch the arm drew is the one trained on
    assert set(arm.seen["advantages_before"]) == {None}  # on_rows: before any advantage
    assert None not in arm.seen["advantages_after"]
    last = res.history[-1]
    assert last["recorder/hooks"] == len(HOOKS) * 2  # its metric is logged, after its other hooks ran
    assert last["update/recorder_rows"] == 2.0 and last["update/recorder_nll"] > 0  # its extra rows trained
    assert "overlong/act_penalty" in last  # the second arm ran beside it


def test_built_in_arms_are_switched_on_by_their_own_keys():
    env = {"rollout": {"mode": "env"}}
    assert TrainConfig(model="x").active_arms == ["shadow_monitor"]  # on for world tasks in rehearse mode
    assert TrainConfig(model="x", **env).active_arms == []
    assert TrainConfig(model="x", algo={"echo_coef": 0.1}, **env).active_arms == ["echo"]
    assert TrainConfig(model="x", grounded={"fraction": 0.5}, shadow_monitor=False).active_arms == ["grounded"]
    both = TrainConfig(model="x", dynamic_sampling={"enabled": True}, flip_advantage_sign=True, arms=["overlong"],
                       **env)
    assert both.active_arms == ["dynamic_sampling", "flip_advantage_sign", "overlong"]
    assert list(build_arms(both)) == both.active_arms
    assert {n: type(a).__name__ for n, a in build_arms(both).items()} == {
        "dynamic_sampling": "DynamicSamplingArm", "flip_advantage_sign": "FlipSignArm", "overlong": "OverlongArm"}


@pytest.mark.parametrize(("arms", "message"), [
    (["nope"], "arms: 'nope' is not a registered training arm (valid names: dynamic_sampling, echo, "),
    (["echo"], "arms: 'echo' is turned on by its own switch (algo.echo_coef > 0); remove it from arms"),
    (["overlong", "overlong"], "names an arm twice; list each once"),
])
def test_a_bad_arms_entry_is_one_line_naming_the_fix(arms, message):
    from pydantic import ValidationError

    with pytest.raises(ValidationError) as e:
        TrainConfig(model="x", arms=arms)
    (err,) = e.value.errors()
    assert message in err["msg"] and "\n" not in err["msg"]


def test_two_arms_drawing_the_batch_are_refused():
    cfg = TrainConfig(model="x", dynamic_sampling={"enabled": True}, arms=["recorder"])
    with pytest.raises(ValueError, match="dynamic_sampling, recorder each draw the step's batch"):
        build_arms(cfg)


def test_the_verl_refusal_is_the_arms_own_reason(monkeypatch):
    from envace.trainers.verl.config import LoopSettings

    builtin = ["dynamic_sampling", "echo", "flip_advantage_sign", "grounded", "shadow_monitor"]
    assert {n: ARMS.get(n).verl_refusal for n in builtin} == dict.fromkeys(builtin, EMBEDDED_ONLY)
    monkeypatch.setattr(ARMS.get("echo"), "verl_refusal", "needs the real answers verl never records")
    with pytest.raises(ValueError, match="envace.echo_coef=0.5: the echo arm needs the real answers verl never "
                                         "records; set envace.echo_coef=0"):
        LoopSettings(echo_coef=0.5)
