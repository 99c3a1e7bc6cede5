"""Evaluation's rehearse-mode fidelity pass never shows Rehearse the test task's own gold responses: a
canary planted in every gold tool response of the test tasks appears in no prompt the engine receives,
while the same rollout given the tasks' own few-shot (the old behaviour) does show it."""

from __future__ import annotations

import dataclasses
import json

from test_paired import GoldEngine  # the gold-replay engine of the paired-evaluation tests

from envace.config import RolloutConfig, SamplingConfig
from envace.evaluation.paired import held_out_tasks
from envace.evaluation.world import evaluate_world
from envace.models.loading import load_policy
from envace.rollout import run_rollout
from envace.types import Message, Mode

CANARY = "CANARY-5e1f"


def _with_canary(task):
    msgs = []
    for m in task.messages:
        if m.role == "tool":
            body = json.loads(m.content)
            body = {**body, "note": CANARY} if isinstance(body, dict) else [*body, CANARY]
            m = Message("tool", json.dumps(body), name=m.name)
        msgs.append(m)
    return dataclasses.replace(task, messages=msgs)


class RecordingGoldEngine(GoldEngine):
    def __init__(self, *args):
        super().__init__(*args)
        self.prompts: list[str] = []

    def generate(self, requests):
        self.prompts += [self.tokenizer.decode(r.prompt_ids) for r in requests]
        return super().generate(requests)


def test_fidelity_pass_shows_no_gold_of_the_test_task(tiny_dir):
    _, tok = load_policy(tiny_dir)
    tasks = [_with_canary(t) for t in held_out_tasks("test", 4)]
    assert any(m.role == "tool" for m in tasks[0].messages), "world tasks carry their gold tool responses"
    rollout = RolloutConfig(mode="rehearse", act=SamplingConfig(temperature=0.0, max_new_tokens=256),
                            rehearse=SamplingConfig(temperature=0.0, max_new_tokens=64),
                            max_context_tokens=100_000, few_shot=True)
    # control: a rehearse-mode rollout on the tasks themselves shows their own gold (the canary) to Rehearse
    leaky = RecordingGoldEngine(tok, tasks, {t.uuid for t in tasks})
    run_rollout(tasks, k=1, policy=leaky, cfg=rollout, mode=Mode.REHEARSE, seed=0)
    assert any(CANARY in p for p in leaky.prompts)

    engine = RecordingGoldEngine(tok, tasks, {t.uuid for t in tasks})
    out = evaluate_world(engine, tasks, rollout, seeds=[0], with_fidelity=True)
    assert out["fidelity"]["pairs"] > 0, "the fidelity pass rehearsed some calls"
    assert engine.prompts and not any(CANARY in p for p in engine.prompts)
