"""The placebo simulator (`placebo_simulator=ack`): every call in a simulator-mode run is answered
`{"status": "ok"}`, the turns are frozen, and the config refuses it where no simulator is asked."""

from __future__ import annotations

import pytest

from envace.execution_result import render_execution_result
from envace.rollout.placebo import ACK
from envace.trainers.config import TrainConfig
from envace.trainers.embedded import train
from envace.types import Role


def _cfg(model_dir, out_dir, **kw):
    base = dict(model=str(model_dir), out_dir=str(out_dir), steps=1, prompts_per_step=3, k=2, save_every=1,
                threads=1, progress=False, data={"n_tasks": 20}, shadow_monitor=False, tracking={"enabled": False},
                placebo_simulator="ack",
                rollout={"mode": "simulator", "max_assistant_turns": 3, "act": {"max_new_tokens": 64}})
    base.update(kw)
    return TrainConfig.model_validate(base)


def test_every_call_is_acknowledged_and_nothing_more(act_sft_dir, tmp_path, scored):
    train(_cfg(act_sft_dir, tmp_path / "run"))
    turns = [t for traj in scored for t in traj.turns if t.role is Role.REHEARSE]
    assert turns, "the SFT'd policy made no tool call: nothing reached the placebo"
    for t in turns:
        assert t.observation.content == {"status": "ok"} and t.observation.error is None
        assert t.text == render_execution_result(ACK) == '<execution_result>\n{"status": "ok"}\n</execution_result>'
        assert not t.trainable  # a frozen simulator's turn is never a training row


@pytest.mark.parametrize(("extra", "message"), [
    ({"placebo_simulator": "ack"}, "placebo_simulator='ack' plays the frozen simulator.*rollout.mode='rehearse'"),
    ({"placebo_simulator": "ack", "rollout": {"mode": "simulator", "simulator_model": "/m"}},
     "no other simulator.*simulator m \\(local\\)"),
    ({"placebo_simulator": "shuffled", "rollout": {"mode": "simulator"}}, "placebo_simulator"),
])
def test_placebo_config_errors_name_the_fix(extra, message):
    with pytest.raises(ValueError, match=message):
        TrainConfig.model_validate({"model": "/m", **extra})


def test_simulator_mode_with_the_placebo_needs_no_other_simulator():
    cfg = TrainConfig.model_validate({"model": "/m", "placebo_simulator": "ack", "rollout": {"mode": "simulator"}})
    assert cfg.simulator_slot is None and cfg.placebo_simulator == "ack"
