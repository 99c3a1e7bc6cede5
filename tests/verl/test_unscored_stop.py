"""envace's verl trainer applies the unscored-episode stop rule to each step's rows (the part of
`_compute_advantage` before verl's own step): rows grouped into episodes by verl's row keys
`{uid}_{session}_{index}`, padding rows ignored, the judge named from the `envace:` section. The rows are
the agent loop's own outputs for a scored and an unscored episode (`episode_outputs`); reading them from
TransferQueue needs a Ray cluster and is covered by tests/verl/test_trainer.py."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from envace.trainers.unscored_guard import UnscoredRunStopped
from envace.trainers.verl.episode import EpisodeResult, episode_outputs
from envace.types import Mode, Role, Task, Trajectory, Turn

pytestmark = pytest.mark.verl


def _rows(reward, uid: str, session: int) -> tuple[list[str], list[dict]]:
    traj = Trajectory(task=Task(uuid="t", tools=[], messages=[]), prompt_index=0, sample_index=session,
                      mode=Mode.REHEARSE)
    for n in range(2):
        traj.add_turn(Turn(role=Role.ACT if n == 0 else Role.REHEARSE, prompt_ids=[1, 2], response_ids=[3, 4],
                           logprobs=[-0.1, -0.1], text="x", temperature=1.0))
    traj.reward = reward
    outs = episode_outputs(EpisodeResult(traj, [], 0.0, 0.0), trajectory_id=f"{uid}_{session}", response_length=8)
    return [f"{uid}_{session}_{i}" for i in range(len(outs))], [o.extra_fields for o in outs]


def _trainer(verl_api, threshold: float, patience: int):
    from envace.trainers.verl.trainer import EnvaceTrainer

    trainer = EnvaceTrainer.__new__(EnvaceTrainer)  # the hook reads only the config and the step counter
    trainer.config = OmegaConf.create({"envace": {
        "reward": "checklist_llm", "judge": {"base_url": "http://judge:8000/v1", "model": "Qwen3-30B-A3B"},
        "unscored": {"threshold": threshold, "patience": patience}}})
    return trainer


def _step(scored_sessions: int, unscored_sessions: int, padding: int = 0):
    keys, extra, tags = [], [], []
    for s in range(scored_sessions + unscored_sessions):
        k, e = _rows(0.5 if s < scored_sessions else None, "uid7", s)
        keys += k
        extra += e
        tags += [{}] * len(k)
    for p in range(padding):  # verl's padding rows: no envace fields
        keys.append(f"pad_{p}_0")
        extra.append({})
        tags.append({"is_padding": True})
    return keys, extra, tags


def test_a_dead_judge_stops_the_verl_run_at_the_patience_step(verl_api):
    trainer = _trainer(verl_api, threshold=0.5, patience=3)
    stopped_at = None
    for step, (good, bad) in enumerate([(0, 4), (1, 3), (4, 0), (0, 4), (0, 4), (0, 4)], start=1):
        trainer.global_steps = step
        metrics: dict = {}
        try:
            trainer._check_unscored(*_step(good, bad, padding=2), metrics)
        except UnscoredRunStopped as exc:
            stopped_at, msg = step, str(exc)
            break
        assert metrics["envace/episodes/unscored_share"] == bad / (good + bad)  # padding rows are no episodes
    assert stopped_at == 6  # steps 1-2 fail, step 3 resets, steps 4-6 fail
    assert "\n" not in msg and msg.startswith("step 6: 4 of 4 episodes unscored (100%); 3 steps in a row")
    assert "Qwen3-30B-A3B at http://judge:8000/v1" in msg


def test_half_unscored_is_not_above_the_threshold(verl_api):
    trainer = _trainer(verl_api, threshold=0.5, patience=1)
    trainer.global_steps = 1
    trainer._check_unscored(*_step(2, 2), {})
    with pytest.raises(UnscoredRunStopped):
        trainer._check_unscored(*_step(1, 3), {})


def test_compute_advantage_checks_before_verls_step(verl_api, monkeypatch):
    """The wiring: `_compute_advantage` reads the rows' extra_fields and stops before verl's own step. The
    TransferQueue read is a stand-in here (the real one needs a Ray cluster, tests/verl/test_trainer.py)."""
    from types import SimpleNamespace

    from envace.trainers.verl import trainer as trainer_module

    keys, extra, tags = _step(0, 3)

    class Fields(dict):
        def tolist(self):  # what tensordict's NonTensorStack gives
            return list(self["rows"])

    class StandInQueue:
        def kv_batch_get(self, *, keys, partition_id, select_fields):
            assert select_fields == ["extra_fields"] and partition_id == "train"
            return {"extra_fields": Fields(rows=extra)}

    monkeypatch.setattr(trainer_module, "_tq", StandInQueue())
    trainer = _trainer(verl_api, threshold=0.5, patience=1)
    trainer.global_steps = 4
    with pytest.raises(UnscoredRunStopped, match="step 4: 3 of 3 episodes unscored"):
        trainer._compute_advantage(SimpleNamespace(keys=keys, partition_id="train", tags=tags), {})
