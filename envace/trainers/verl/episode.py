"""One EnvACE episode for the verl agent loop, and its training rows as verl `AgentLoopOutput`s.

`run_episode` is synchronous (it runs in a worker thread): it drives envace's rollout state machine
(`envace.rollout.run_rollout`, one task, one sample) with the given policy engine (the bridge to verl's
servers), then scores the trajectory with the embedded trainer's `RewardScorer` (checklist rule judge, LLM
judge, or the tool world's end state, verified by replaying the Act calls on a fresh world). `episode_outputs`
turns every *trainable* generation into one row:
prompt = that call's full prompt ids, response = its generated ids (mask all 1, its sampled log-probs),
`reward_score` = the episode reward on every row, and `extra_fields` carrying the role, the trajectory
id and the turn index for the role-wise advantage, and the call's log-prob temperature (its sampling
temperature; 1.0 for a greedy call) for the trainer's per-row log-probs. Frozen-simulator generations are not rows.

An unscored episode (judge failure) gets `reward_score` 0.0 so verl's metrics stay finite, with
`extra_fields["envace_scored"] = False`: envace's trainer leaves such rows out of the group baselines
and gives them advantage 0 (verl's generic estimators would count them as 0), and their response mask is
all 0, so verl's loss (`agg_loss` over `loss_mask` = `response_mask`, fully masked rows skipped) counts
neither their tokens nor their rows in any denominator, as the embedded update leaves them out. A row
whose text is empty gets `empty_output_penalty` subtracted from its `reward_score` (the reference's
invalid-action penalty); `LoopSettings` refuses `envace.empty_output_penalty` > 0, because verl's V1 adapter
copies the episode's last row reward onto its earlier rows, so on verl the loop always passes 0.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from envace.config import RolloutConfig, SamplingConfig
from envace.engines.base import GenerationEngine, logprob_temperature
from envace.rewards import JudgeSettings, LLMJudge
from envace.rollout import run_rollout
from envace.trainers.rewarding import RewardScorer
from envace.trainers.train_rows import is_empty_output
from envace.trainers.verl.config import LoopSettings
from envace.types import Environment, Mode, Task, Trajectory


@dataclass
class EpisodeResult:
    trajectory: Trajectory  # scored: reward, reward_breakdown and termination set
    environments: list[Environment]  # real environments the rollout created (env mode only)
    rollout_seconds: float
    score_seconds: float


def rollout_config(settings: LoopSettings, sampling_params: dict[str, Any], *, response_length: int,
                   prompt_length: int, max_model_len: int | None = None) -> RolloutConfig:
    """envace's RolloutConfig for one session: role sampling = verl's per-call parameters overridden by
    the roles' own settings; limits from the rollout lengths; the episode rules copied from the settings."""
    base_t = float(sampling_params.get("temperature", 1.0))
    base_p = float(sampling_params.get("top_p", 1.0))
    if base_p <= 0 or base_p > 1:
        base_p = 1.0

    def role(r: Any) -> SamplingConfig:
        return SamplingConfig(temperature=base_t if r.temperature is None else r.temperature,
                              top_p=base_p if r.top_p is None else r.top_p,
                              max_new_tokens=min(r.max_tokens or response_length, response_length))

    limit = settings.max_context_tokens or (prompt_length + response_length)
    if max_model_len:
        limit = min(limit, int(max_model_len))
    return RolloutConfig(mode=settings.mode, act=role(settings.act), rehearse=role(settings.rehearse),
                         max_assistant_turns=settings.max_assistant_turns,
                         max_calls_per_turn=settings.max_calls_per_turn, max_context_tokens=max(32, limit),
                         few_shot=settings.few_shot, rehearse_style=settings.rehearse_style,
                         **settings.rule_values())  # the episode rules: the embedded trainer's switches


_JUDGES: dict[str, LLMJudge] = {}
_JUDGES_LOCK = threading.Lock()


def judge_for(settings: LoopSettings) -> LLMJudge | None:
    """One LLM judge per endpoint and process (its HTTP client pools connections across episodes)."""
    if settings.reward != "checklist_llm" or settings.judge is None:
        return None
    from envace.trainers.verl.bridge import ChatJudgeBackend

    key = settings.judge.model_dump_json() + f"|{settings.judge_attempts}|{settings.judge_temperature}"
    with _JUDGES_LOCK:
        if key not in _JUDGES:
            _JUDGES[key] = LLMJudge(ChatJudgeBackend(settings.judge),
                                    JudgeSettings(attempts=settings.judge_attempts,
                                                  temperature=settings.judge_temperature))
        return _JUDGES[key]


def run_episode(task: Task, settings: LoopSettings, cfg: RolloutConfig, policy: GenerationEngine, *,
                step: int, seed: int, enable_thinking: bool, simulator: GenerationEngine | None = None,
                env_factory: Callable[[], Environment] | None = None) -> EpisodeResult:
    """Roll out one episode of `task` and score it (blocking; call from a worker thread)."""
    mode = Mode(settings.mode)
    created: list[Environment] = []
    factory = None
    if mode is Mode.ENV:
        make = env_factory or _world_environment

        def factory() -> Environment:
            env = make()
            created.append(env)
            return env

    # the embedded trainer's scorer: same turn gate (rule judge; none for the LLM judge) and same reward
    scorer = RewardScorer(settings.reward, judge=judge_for(settings))
    t0 = time.perf_counter()
    (traj,) = run_rollout([task], k=1, policy=policy, cfg=cfg, mode=mode, env_factory=factory,
                          simulator=simulator, step=step, seed=seed, turn_gate=scorer.turn_gate,
                          rehearse_style=settings.rehearse_style, enable_thinking=enable_thinking)
    t1 = time.perf_counter()
    scorer.score([traj])
    return EpisodeResult(traj, created, t1 - t0, time.perf_counter() - t1)


def _world_environment() -> Environment:
    from envace.worlds.environment import WorldEnvironment

    return WorldEnvironment()


def episode_outputs(result: EpisodeResult, *, trajectory_id: str, response_length: int,
                    generation: Any = None, empty_output_penalty: float = 0.0) -> list[Any]:
    """One verl `AgentLoopOutput` per trainable role call of the episode, in generation order."""
    from envace.trainers.verl.deps import require

    agent_loop = require("verl.experimental.agent_loop.agent_loop")
    traj = result.trajectory
    scored = traj.reward is not None
    reward = float(traj.reward) if scored else 0.0
    reward_info = {"score": reward, "envace_scored": float(scored), "env_calls": float(traj.env_calls)}
    metrics = agent_loop.AgentLoopMetrics(
        generate_sequences=getattr(generation, "seconds", 0.0),
        tool_calls=max(0.0, result.rollout_seconds - getattr(generation, "seconds", 0.0)),
        compute_score=result.score_seconds, num_preempted=getattr(generation, "num_preempted", -1))
    rows = [(i, t) for i, t in enumerate(traj.turns) if t.trainable and t.response_ids]
    outputs = []
    for n, (i, turn) in enumerate(rows):
        ids = list(turn.response_ids[:response_length])
        logprobs = list(turn.logprobs[: len(ids)]) if len(turn.logprobs) >= len(ids) else None
        last = n == len(rows) - 1
        extra = {
            "role": turn.role.value, "trajectory_id": trajectory_id, "turn_index": i, "row_index": n,
            "temperature": logprob_temperature(turn.temperature),
            "user_turn": turn.user_turn, "termination": traj.termination.value if traj.termination else None,
            "envace_scored": scored, "envace_reward": traj.reward,
            "envace_breakdown": json.dumps(traj.reward_breakdown, default=str) if last else None,
            "reward_extra_info": dict(reward_info),
            "min_global_steps": getattr(generation, "min_global_steps", None),
            "max_global_steps": getattr(generation, "max_global_steps", None),
        }
        penalty = empty_output_penalty if scored and empty_output_penalty and is_empty_output(turn.text) else 0.0
        outputs.append(agent_loop.AgentLoopOutput(
            prompt_ids=list(turn.prompt_ids), response_ids=ids, response_mask=[int(scored)] * len(ids),
            response_logprobs=logprobs, reward_score=reward - penalty, num_turns=len(traj.messages),
            metrics=metrics.model_copy(), extra_fields=extra))
    return outputs
