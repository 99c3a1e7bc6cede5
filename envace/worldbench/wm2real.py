"""WM2Real agreement: does an episode played inside the world model end the way the real world says it did?

A rehearsed episode is the Act checkpoint playing a built-in tool-world test task while the world model
answers every call (envace.rollout.machine, `simulator` mode with the scored model slot, or `rehearse`
mode with the Act checkpoint's own Rehearse role when no slot is given; Rehearse few-shot from the
training split, as evaluation draws it). Its answered calls are then replayed, in order, in a fresh real
`WorldEnvironment` (envace.trainers.arms.shadow.real_messages): the same actions with the real answers.
Per episode:
- **task success agreement**: the rehearsed verdict equals the real one, both given by the task's CM2
  checklist rules (envace.rewards.rule_judge, the rehearse-mode reward: a turn scores 0 when one of its calls
  failed) — on the rehearsed transcript and on the replayed one. Success is a checklist score of 1.
- **end-state agreement**: the real end state (every call replayed) equals the end state the rehearsed
  episode describes: the world model has no state of its own, so its end state is read off its decisions —
  the calls it answered without an error replayed in a fresh real world, the ones it refused left out.
Also reported: the rehearsed and real success rates, the verified success of the replay (the world's own
end-state and answer check, `WorldEnvironment.final_check`) and `false_positive`, the share of episodes
the rehearsed world calls a success that the verified check fails (the offline-evaluation false positive
of arXiv 2604.13824). Each is a per-episode 0/1 with intervals over tasks (and seeds, with several:
envace.worldbench.intervals).

An oracle world model (the real answers) agrees on both by construction; a tool-world call the real world
refuses leaves its state unchanged, so replaying only the accepted calls then gives the same end state.

Sources: only the built-in tool world replays here. τ² episodes unfold through τ²'s LLM user simulator,
VitaBench is judged by rubrics with an LLM user, and BFCL's recorded data are gold calls per turn, not
episodes with a verifiable end; `REFUSED` says so for each.

Departures: success is the checklist verdict on both sides (the same function, so only the observations
differ), not the world's verified end state, which a rehearsed transcript cannot be checked against; the
replay keeps the rehearsed episode's actions (with real answers the agent might have acted otherwise).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from envace.execution_result import is_error_value
from envace.types import Message, ToolCall, Trajectory
from envace.worldbench.intervals import interval_summary

REFUSED = {
    "tau2": "a τ² episode unfolds through τ²'s LLM user simulator, which cannot run offline: no rehearsed "
            "episode to replay",
    "bfcl": "worldbench records BFCL's gold calls per turn, not episodes an Act policy played; rehearsed BFCL "
            "episodes with a verifiable end are not built",
    "vita": "VitaBench is judged by rubrics with an LLM user: no verifiable end state to agree with offline",
}
RATES = ("success_agree", "end_state_agree", "rehearsed_success", "real_success", "verified_success",
         "false_positive")


@dataclass
class EpisodeAgreement:
    task_id: str
    domain: str
    seed: int
    calls: int  # answered calls replayed
    rehearsed_refused: int  # of them, answered with an error by the world model
    real_refused: int  # ... and by the real world
    rehearsed_success: bool
    real_success: bool
    verified_success: bool
    end_state_agree: bool
    termination: str

    @property
    def success_agree(self) -> bool:
        return self.rehearsed_success == self.real_success

    @property
    def false_positive(self) -> bool:
        return self.rehearsed_success and not self.verified_success

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "success_agree": self.success_agree, "false_positive": self.false_positive}


def answered_calls(messages: Sequence[Message]) -> list[tuple[ToolCall, str]]:
    """(call, the tool message's text) of every answered call, paired in order as the shadow replay pairs
    them (a tool message without a tool name answers no call: a malformed Act output's parser error)."""
    out: list[tuple[ToolCall, str]] = []
    queue: list[ToolCall] = []
    for m in messages:
        if m.role == "assistant":
            queue = list(m.tool_calls)
        elif m.role == "tool" and m.name is not None and queue:
            out.append((queue.pop(0), m.content))
    return out


def _refused(text: str) -> bool:
    try:
        return is_error_value(json.loads(text))
    except (json.JSONDecodeError, RecursionError, ValueError, TypeError):
        return True  # what Act saw was not a result: nothing took effect in the rehearsed world


def _success(traj: Trajectory, messages: list[Message]) -> bool:
    from envace.rewards.rule_judge import score_messages

    score = score_messages(traj.task, messages).score
    if score is None:
        raise ValueError(f"task {traj.task.uuid!r}: its checklist could not be decided by rules; WM2Real needs "
                         "tool-world tasks (envace.worlds.generator)")
    return score >= 1.0 - 1e-9


def episode_agreement(traj: Trajectory, seed: int = 0) -> EpisodeAgreement:
    """Replay `traj`'s answered calls in the real tool world and compare (module docstring)."""
    from envace.trainers.arms.shadow import real_messages
    from envace.worlds.environment import WorldEnvironment

    real_env = WorldEnvironment()
    real_env.reset(traj.task)
    real_msgs, real_obs = real_messages(traj, real_env)
    answered = answered_calls(traj.messages)
    if len(answered) != len(real_obs):
        raise RuntimeError(f"task {traj.task.uuid!r}: {len(answered)} answered calls but {len(real_obs)} replayed")
    refused = [_refused(text) for _, text in answered]
    believed = WorldEnvironment()  # the world as rehearsed: only the calls the world model accepted took effect
    believed.reset(traj.task)
    for (call, _), no in zip(answered, refused):
        if not no:
            believed.execute(call)
    replayed = dataclasses.replace(traj, messages=real_msgs)
    return EpisodeAgreement(
        task_id=traj.task.uuid, domain=traj.task.domain, seed=seed, calls=len(answered),
        rehearsed_refused=sum(refused), real_refused=sum(not o.ok for o in real_obs),
        rehearsed_success=_success(traj, traj.messages), real_success=_success(traj, real_msgs),
        verified_success=real_env.final_check(replayed).reward == 1.0,
        end_state_agree=believed.state_hash() == real_env.state_hash(),
        termination=traj.termination.value if traj.termination is not None else "")


def wm2real_tasks(n: int) -> list[Any]:
    """The first `n` held-out tool-world test tasks, their Rehearse few-shot drawn from the training split."""
    from envace.evaluation.paired import Split, held_out_tasks
    from envace.evaluation.world import FEW_SHOT_POOL
    from envace.roles.rehearse import with_training_few_shot
    from envace.worlds.generator import generate_tasks

    return with_training_few_shot(held_out_tasks(Split.TEST, n), generate_tasks(FEW_SHOT_POOL, "train", 0))


def rehearsed_episodes(act_engine: Any, world_engine: Any | None, tasks: list[Any], seed: int, *,
                       temperature: float = 0.0, max_new_tokens: int = 64, rehearse_style: str = "history",
                       max_context_tokens: int = 1024) -> list[Trajectory]:
    """One episode per task: Act answered by `world_engine` (simulator mode) or by Act's own Rehearse role, the
    rollout's default episode rules."""
    from envace.config import RolloutConfig, SamplingConfig
    from envace.rollout.machine import run_rollout
    from envace.types import Mode

    sampling = SamplingConfig(temperature=temperature, max_new_tokens=max_new_tokens)
    mode = Mode.REHEARSE if world_engine is None else Mode.SIMULATOR
    cfg = RolloutConfig(mode=mode.value, act=sampling, rehearse=sampling, rehearse_style=rehearse_style,
                        max_context_tokens=max_context_tokens)
    return run_rollout(tasks, k=1, policy=act_engine, cfg=cfg, mode=mode, simulator=world_engine, seed=seed)


def summarize_wm2real(per_seed: Sequence[Sequence[EpisodeAgreement]], n_boot: int = 1000,
                      seed: int = 0) -> dict[str, Any]:
    """{rate: interval summary} over [tasks, seeds] (every seed must cover the same tasks in the same order)."""
    ids = [[e.task_id for e in eps] for eps in per_seed]
    if not ids or any(x != ids[0] for x in ids):
        raise ValueError("WM2Real seeds must play the same tasks in the same order")
    out: dict[str, Any] = {"episodes": sum(len(e) for e in per_seed), "tasks": len(ids[0])}
    for rate in RATES:
        vals = np.array([[float(getattr(e, rate)) for e in eps] for eps in per_seed]).T
        out[rate] = interval_summary(vals, n_boot, seed)
    out["calls"] = sum(e.calls for eps in per_seed for e in eps)
    return out
