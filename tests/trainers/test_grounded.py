"""The grounded arm (envace.trainers.arms.grounded) through the trainer's own row builder (`step_rows`) on scripted
rehearse-mode episodes: with a Rehearse seat that writes exactly the real answer every grounded call scores
fidelity 1; a Rehearse that writes wrong answers gets less, the episode goes on with its answers and no Act
prompt ever holds the real one; the Rehearse-row reward is task + w x fidelity and the advantages are role-wise
GRPO on those rewards (hand-computed); fraction 0 is plain EnvACE, also end to end in `train`."""

from __future__ import annotations

import pytest
from scripted_episodes import ScriptedAct, plan

from envace.config import RolloutConfig, SamplingConfig
from envace.engines.base import GenResult
from envace.execution_result import render_execution_result
from envace.rollout import run_rollout
from envace.rollout.oracle import OracleRehearser
from envace.trainers.arms.base import StepContext, build_arms
from envace.trainers.arms.grounded import chosen
from envace.trainers.config import TrainConfig
from envace.trainers.embedded import step_rows, train
from envace.trainers.rewarding import RewardScorer
from envace.types import Mode, Role
from envace.worlds.environment import WorldEnvironment
from envace.worlds.generator import generate_tasks

WRONG = {"status": "ok", "note": "made up"}


@pytest.fixture(scope="module")
def world():
    from envace.models.corpus import task_strings
    from envace.models.tokenizer import train_tokenizer

    tasks = generate_tasks(6, "train", 0)
    tok = train_tokenizer([s for t in tasks for s in task_strings(t)], vocab_size=1024)
    return tasks, tok


class WrongRehearser:
    """Answers every call with the same made-up success."""

    chat = False

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer

    def generate(self, requests):
        text = render_execution_result(WRONG)
        ids = self.tokenizer.encode(text, add_special_tokens=False)
        return [GenResult(token_ids=ids, logprobs=[-0.5] * len(ids), text=text) for _ in requests]


def rollouts(world, rehearser: str, kind: str = "gold"):
    tasks, tok = world
    cfg = RolloutConfig(act=SamplingConfig(max_new_tokens=200), rehearse=SamplingConfig(max_new_tokens=200),
                        max_assistant_turns=6, max_context_tokens=4096, rehearse_style="full")
    scorer = RewardScorer("checklist_rule")
    out = []
    for i, task in enumerate(tasks[:4]):
        act = ScriptedAct(tok, plan(task, kind))
        seat = OracleRehearser(tok, [task], WorldEnvironment) if rehearser == "oracle" else WrongRehearser(tok)
        trajs = run_rollout([task], k=2, policy={Role.ACT: act, Role.REHEARSE: seat}, cfg=cfg, mode=Mode.REHEARSE,
                            step=1, seed=i, turn_gate=scorer.turn_gate)
        scorer.score(trajs)
        for t in trajs:
            t.prompt_index = i
        out.extend(trajs)
    return out, tok


def grounded_rows(trajs, cfg, tok):
    """The trainer's row builder with the arms `cfg` turns on, and the grounded arm's grounding (None: off)."""
    arms = build_arms(cfg)
    rows, extra = step_rows(StepContext.of(cfg, 1, trajs, tok), arms)
    return rows, extra, (arms["grounded"].grounding if "grounded" in arms else None)


def _cfg(**grounded):
    return TrainConfig(model="x", seed=3, grounded=grounded)


@pytest.mark.parametrize("metric", ["leaf_f1", "exact"])
def test_a_faithful_rehearse_scores_fidelity_one_on_every_grounded_call(world, metric):
    trajs, tok = rollouts(world, "oracle")
    rows, echo, g = grounded_rows(trajs, _cfg(fraction=1.0, metric=metric, coef=0.5), tok)
    answered = [u for t in trajs for u in t.turns_of(Role.REHEARSE) if u.call is not None]
    assert len(answered) > 4 and echo == []
    assert len(g.fidelity) == len(answered) and set(g.fidelity.values()) == {1.0}
    assert g.metrics()["grounded/calls"] == len(answered) and g.metrics()["grounded/fidelity"] == 1.0
    assert all(t.env_calls == 0 for t in trajs)  # the episodes themselves made no real call
    reward = {id(u): t.reward for t in trajs for u in t.turns}
    for r in rows:
        assert r.reward == pytest.approx(reward[id(r.turn)] + (0.5 if r.role is Role.REHEARSE else 0.0))


def test_the_episode_goes_on_with_the_rehearsed_answer_and_never_shows_the_real_one(world):
    trajs, tok = rollouts(world, "wrong")
    rows, _, g = grounded_rows(trajs, _cfg(fraction=1.0, metric="leaf_f1", coef=1.0), tok)
    differing = 0
    for t in trajs:
        acts = [tok.decode(u.prompt_ids, skip_special_tokens=False) for u in t.turns_of(Role.ACT)]
        tool_texts = [m.content for m in t.messages if m.role == "tool" and m.name is not None]
        for u in t.turns_of(Role.REHEARSE):
            real = u.real_observation.to_text()
            assert g.fidelity[id(u)] < 1.0
            if real != u.observation.to_text():
                differing += 1
                assert all(real not in p for p in acts), real  # Act never saw the real answer
        assert tool_texts and all(text == u.observation.to_text() for text in tool_texts)  # the rehearsed one
    assert differing > 4
    # role-wise GRPO on the row rewards, by hand: Rehearse rows R + f, baseline the prompt's Rehearse rows' mean
    for p in {r.prompt_index for r in rows}:
        for role in (Role.ACT, Role.REHEARSE):
            group = [r for r in rows if r.prompt_index == p and r.role is role]
            mean = sum(r.reward for r in group) / len(group)
            for r in group:
                traj_reward = next(t.reward for t in trajs if any(u is r.turn for u in t.turns))
                bonus = g.fidelity[id(r.turn)] if role is Role.REHEARSE else 0.0
                assert r.reward == pytest.approx(traj_reward + bonus)
                assert r.advantage == pytest.approx(r.reward - mean, abs=1e-6)


def test_fraction_zero_is_plain_envace_and_the_choice_is_seeded(world):
    trajs, tok = rollouts(world, "oracle")  # fidelity 1 where grounded: a half-grounded step must differ
    plain, _, none = grounded_rows(trajs, TrainConfig(model="x", seed=3), tok)
    plain = [(r.reward, r.advantage) for r in plain]
    zero, _, g0 = grounded_rows(trajs, _cfg(fraction=0.0), tok)
    assert none is None and g0 is None and [(r.reward, r.advantage) for r in zero] == plain
    half = [len(chosen(t, 0.5, 3, 1)) for t in trajs]
    assert half == [len(chosen(t, 0.5, 3, 1)) for t in trajs]  # the same calls every time
    total = sum(len(t.turns_of(Role.REHEARSE)) for t in trajs)
    assert 0 < sum(half) < total
    some, _, g = grounded_rows(trajs, _cfg(fraction=0.5), tok)
    assert len(g.fidelity) == sum(half)
    assert [(r.reward, r.advantage) for r in some] != plain


def test_grounded_needs_rehearse_mode_on_the_world():
    with pytest.raises(ValueError, match="grounded.fraction.*rollout.mode=rehearse"):
        TrainConfig(model="x", rollout={"mode": "env"}, grounded={"fraction": 0.5})
    with pytest.raises(ValueError, match="grounded.fraction"):
        TrainConfig(model="x", data={"source": "cm2", "path": "x.json"}, grounded={"fraction": 0.5})


def test_train_with_fraction_zero_equals_plain_envace(tiny_model_dir, tmp_path):
    def run(out, **kw):
        cfg = TrainConfig.model_validate(dict(
            model=str(tiny_model_dir), out_dir=str(tmp_path / out), steps=2, prompts_per_step=2, k=2, save_every=2,
            threads=1, progress=False, data={"n_tasks": 20}, tracking={"enabled": False},
            rollout={"max_assistant_turns": 2, "act": {"max_new_tokens": 16}, "rehearse": {"max_new_tokens": 16}},
            **kw))
        return [{k: v for k, v in h.items() if not k.startswith("time/")} for h in train(cfg).history]

    assert run("plain") == run("zero", grounded={"fraction": 0.0, "coef": 2.0})


@pytest.mark.parametrize("key, arm", [("echo_coef", "echo"), ("grounded_fraction", "grounded")])
def test_the_verl_loop_refuses_both_arms(key, arm):
    from envace.trainers.verl.config import LoopSettings

    with pytest.raises(ValueError, match=f"envace.{key}=0.5: the {arm} arm runs on the embedded backend only"):
        LoopSettings(**{key: 0.5})
    assert getattr(LoopSettings(**{key: 0.0}), key) == 0.0
