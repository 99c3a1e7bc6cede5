"""Dynamic sampling (DAPO): zero-variance groups are dropped and refilled from unused prompts, seeded
by (seed, step, refill round); the step keeps exactly `prompts_per_step` informative groups when the
rounds allow, and the trainer trains only on those. The rule is the same in every rollout mode: the trainer's
step (`rollout_step`) on the same tasks, with the same rewards in rehearse, env and simulator mode (a
scripted Act that gives up on a seeded share of turns; the real world's answers from the environment, from
the oracle in the Rehearse seat, or from the oracle as the frozen simulator), drops and refills the same
groups."""

from __future__ import annotations

import random

import pytest

from envace.rollout.seeds import derive_seed
from envace.trainers.arms.dynamic_sampling import informative_groups, refill_size, sample_with_refill
from envace.types import Mode, Role, Task, Trajectory


def _tasks(n: int) -> list[Task]:
    return [Task(uuid=f"t{i}", tools=[], messages=[]) for i in range(n)]


def _rollout_by_rule(informative: set[str], k: int = 3, calls: list | None = None):
    """A rollout whose groups disagree (rewards 0,1,0,...) exactly for the task uuids in `informative`."""
    def rollout(tasks, first_index, seed):
        if calls is not None:
            calls.append(([t.uuid for t in tasks], first_index, seed))
        out = []
        for p, task in enumerate(tasks):
            for s in range(k):
                reward = float(s % 2) if task.uuid in informative else 0.5
                out.append(Trajectory(task=task, prompt_index=first_index + p, sample_index=s, mode=Mode.REHEARSE,
                                      reward=reward))
        return out
    return rollout


def test_informative_groups_by_hand():
    task = Task(uuid="x", tools=[], messages=[])
    mk = lambda p, r: Trajectory(task=task, prompt_index=p, sample_index=0, mode=Mode.ENV, reward=r)  # noqa: E731
    trajs = [mk(0, 1.0), mk(0, 1.0), mk(1, 0.0), mk(1, 0.25), mk(2, None), mk(2, 1.0), mk(3, 0.0), mk(3, None),
             mk(3, 0.5)]
    # group 0 all equal, group 1 differs, group 2 has one scored reward only, group 3 differs among scored
    assert informative_groups(trajs) == [1, 3]


def test_refill_size_clamps_to_deficit_and_four_times():
    assert refill_size(4, 8, 8) == 4  # everything informative so far: ask for the deficit
    assert refill_size(4, 4, 8) == 8  # half informative: twice the deficit
    assert refill_size(3, 0, 8) == 12  # nothing informative: capped at 4x
    assert refill_size(2, 3, 10) == 7  # ceil(2 / 0.3)


def test_refill_reaches_the_batch_with_seeded_prompts():
    pool = _tasks(40)
    good = {f"t{i}" for i in range(0, 40, 3)}  # a third of the prompts disagree
    first = pool[:6]  # t0, t3 informative
    calls = []
    batch = sample_with_refill(pool, first, _rollout_by_rule(good, calls=calls), seed=7, step=5,
                               prompts_per_step=6, max_refill_rounds=5)
    # replay the rule by hand: each round samples refill_size(...) unused prompts with seed (7, 5, refill, r)
    used, keep, next_index, generated = [t.uuid for t in first], ["t0", "t3"], 6, 6
    expected_calls = [([t.uuid for t in first], 0, 7)]
    r = 0
    while len(keep) < 6:
        r += 1
        unused = [t for t in pool if t.uuid not in used]
        n = min(len(unused), refill_size(6 - len(keep), len(keep), generated))
        picked = random.Random(derive_seed(7, 5, "refill", r)).sample(unused, n)
        expected_calls.append(([t.uuid for t in picked], next_index, derive_seed(7, 5, "refill", r)))
        used += [t.uuid for t in picked]
        keep += [t.uuid for t in picked if t.uuid in good]
        next_index += n
        generated += n
    assert calls == expected_calls
    assert batch.refill_rounds == r
    assert batch.groups_generated == generated and len(batch.generated) == 3 * generated
    assert len(batch.kept_prompt_indices) == 6 and len(batch.kept) == 18
    assert [t.task.uuid for t in batch.kept[::3]] == keep[:6]
    assert all(t.task.uuid in good for t in batch.kept)
    m = batch.metrics()
    assert m["dynamic/kept_share"] == pytest.approx(len(keep) / generated)
    assert m["dynamic/rollouts"] == 3 * generated


def test_rounds_run_out_and_the_step_trains_on_what_it_has():
    pool = _tasks(30)
    batch = sample_with_refill(pool, pool[:4], _rollout_by_rule({"t1", "t20"}), seed=0, step=1,
                               prompts_per_step=4, max_refill_rounds=2)
    assert batch.refill_rounds == 2
    assert 1 <= len(batch.kept_prompt_indices) < 4
    assert {t.task.uuid for t in batch.kept} <= {"t1", "t20"}
    none = sample_with_refill(pool, pool[:4], _rollout_by_rule(set()), seed=0, step=1, prompts_per_step=4,
                              max_refill_rounds=0)
    assert none.kept == [] and none.refill_rounds == 0 and len(none.generated) == 12


def test_trainer_with_dynamic_sampling_refills_and_skips_signal_free_steps(tiny_model_dir, tmp_path):
    """The real loop on the tiny model with a toy reward nobody earns: no group is informative, so every
    refill round runs (4x the deficit of 2 each), nothing is trained, and the counts add up."""
    from envace.trainers.config import TrainConfig
    from envace.trainers.embedded import train

    cfg = TrainConfig.model_validate(dict(
        model=str(tiny_model_dir), out_dir=str(tmp_path / "run"), steps=2, prompts_per_step=2, k=3, save_every=5,
        threads=1, progress=False, data={"n_tasks": 30}, reward="toy",
        toy_reward={"kind": "first_call_tool", "target": "never_a_tool"},
        dynamic_sampling={"enabled": True, "max_refill_rounds": 2}, tracking={"enabled": False},
        rollout={"max_assistant_turns": 1, "act": {"max_new_tokens": 8}, "rehearse": {"max_new_tokens": 8}}))
    hist = train(cfg).history
    assert len(hist) == 2
    for h in hist:
        assert h["dynamic/refill_rounds"] == 2
        assert h["dynamic/kept_share"] == 0.0 and h["dynamic/groups_kept"] == 0
        assert h["dynamic/groups_generated"] == 2 + 8 + 8  # share 0 so far: each round asks 4x the deficit
        assert h["dynamic/rollouts"] == 3 * 18
        assert h["act/rows"] == 0 and "loss" not in h
        assert h["reward/mean"] == 0.0


def test_dynamic_sampling_config_is_validated():
    from envace.trainers.config import TrainConfig

    with pytest.raises(ValueError, match="max_refill_rounds"):
        TrainConfig.model_validate({"model": "m", "dynamic_sampling": {"max_refill_rounds": -1}})
    with pytest.raises(ValueError, match="dynamic_sampling"):
        TrainConfig.model_validate({"model": "m", "dynamic_sampling": {"enable": True}})


def test_refill_is_the_same_in_every_mode(tmp_path):
    """Same tasks and rewards in rehearse, env and simulator mode: the same groups kept, dropped and refilled."""
    from scripted_episodes import ScriptedAct

    from envace.models.corpus import task_strings
    from envace.models.tokenizer import train_tokenizer
    from envace.rollout.oracle import OracleRehearser
    from envace.trainers.config import TrainConfig
    from envace.trainers.embedded import rollout_step
    from envace.trainers.rewarding import RewardScorer
    from envace.worlds.environment import WorldEnvironment
    from envace.worlds.generator import generate_tasks

    pool = list({t.user_turns[0]: t for t in generate_tasks(60, "train", 0)}.values())[:24]  # distinct openings
    assert len(pool) == 24
    tok = train_tokenizer([s for t in pool for s in task_strings(t)], vocab_size=1024)
    act = ScriptedAct.for_tasks(tok, pool, "gold", slip=0.1)
    oracle = OracleRehearser(tok, pool, WorldEnvironment)

    class Seats:  # what rollout_step asks of the trainer's policy: its engines per role
        def __init__(self, engines):
            self.engines = engines

        def rollout_policy(self):
            return self.engines

    cfg = TrainConfig.model_validate(dict(
        model="unused", out_dir=str(tmp_path), prompts_per_step=4, k=3, seed=5,
        dynamic_sampling={"enabled": True, "max_refill_rounds": 3},
        rollout={"rehearse_style": "full", "max_assistant_turns": 6, "max_context_tokens": 4096,
                 "act": {"max_new_tokens": 200}, "rehearse": {"max_new_tokens": 200}}))
    scorer = RewardScorer("checklist_rule")
    seats = {Mode.REHEARSE: ({Role.ACT: act, Role.REHEARSE: oracle}, None, None),
             Mode.ENV: (act, scorer.env_factory(), None), Mode.SIMULATOR: (act, None, oracle)}
    seen = {}
    for mode, (engines, env_factory, simulator) in seats.items():
        mode_cfg = cfg.model_copy(update={"rollout": cfg.rollout.model_copy(update={"mode": mode.value})})
        batch = rollout_step(pool, mode_cfg, 2, Seats(engines), mode, scorer, env_factory, simulator)
        assert {t.mode for t in batch.generated} == {mode}
        seen[mode] = batch
    first = seen[Mode.REHEARSE]
    # not vacuous: some groups had no signal and were dropped, refills ran, and the step filled its batch
    assert first.refill_rounds >= 1 and first.groups_generated > len(first.kept_prompt_indices) == 4
    assert len(informative_groups(first.generated)) < first.groups_generated
    for mode, batch in seen.items():
        assert [(t.task.uuid, t.prompt_index, t.reward) for t in batch.generated] == \
            [(t.task.uuid, t.prompt_index, t.reward) for t in first.generated], mode  # the same rewards
        assert (batch.kept_prompt_indices, batch.refill_rounds, batch.groups_generated, batch.groups_informative) \
            == (first.kept_prompt_indices, first.refill_rounds, first.groups_generated, first.groups_informative), mode
        assert [id(t) for t in batch.kept] == [id(t) for t in batch.generated if t.prompt_index in
                                               set(first.kept_prompt_indices)]
        assert batch.metrics() == first.metrics()
