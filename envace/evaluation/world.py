"""Evaluation on the built-in tool world with the REAL environment.

For each evaluation seed: K committed episodes per task in `env` mode (or test-time rehearsal first),
scored by the verifiable end state (success: the world's final database and the stated answers match
the gold ones) and by the CM2 checklist (rule judge). Reported as Avg@k overall and per domain, plus
tool-call validity. Rehearsal fidelity comes from a separate `rehearse`-mode pass in which each call is
also executed in a shadow real environment the policy never sees: JSON validity, shape (schema)
correctness, exact match and field-level F1 of rehearsed vs real responses, overall and per tool.
That pass shows Rehearse few-shot examples drawn from training-split tasks, never the test task's own
gold calls or responses.
"""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import asdict
from typing import Any

from envace.config import RolloutConfig, SamplingConfig
from envace.engines.base import GenerationEngine
from envace.fidelity import aggregate_by_tool, aggregate_errors, turn_error_verdict, turn_fidelity
from envace.rewards.env_reward import env_state_reward
from envace.rewards.rule_judge import score_rule
from envace.roles.rehearse import few_shot_triples
from envace.rollout import run_rollout
from envace.tts.config import TTSConfig
from envace.tts.rollout import tts_rollout
from envace.types import ErrorCode, Mode, Role, Task, Trajectory

FEW_SHOT_POOL = 200  # training-split tasks the fidelity pass draws its Rehearse few-shot from


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else 0.0


def score_episodes(trajs: list[Trajectory]) -> dict[str, Any]:
    """Success (end state), checklist reward and tool-call validity, overall and per domain."""
    per_domain: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    succ, rew, valid = [], [], []
    for t in trajs:
        s = env_state_reward(t).reward or 0.0
        r = score_rule(t).score
        succ.append(s)
        rew.append(r or 0.0)
        per_domain[t.task.domain or "?"]["success"].append(s)
        per_domain[t.task.domain or "?"]["reward"].append(r or 0.0)
        t.reward = r
        t.reward_breakdown.setdefault("success", s)
        for u in t.turns_of(Role.ACT):
            valid.append(0.0 if u.parse_error not in (None, ErrorCode.NO_TOOL_CALL) else 1.0)
    return {"success": _mean(succ), "reward": _mean(rew), "tool_call_validity": _mean(valid),
            "episodes": len(trajs),
            "per_domain": {d: {k: _mean(v) for k, v in m.items()} for d, m in sorted(per_domain.items())}}


def fidelity(trajs: list[Trajectory], few_shot: bool = True) -> dict[str, Any]:
    """Rehearsed vs real responses for every Rehearse turn that has a shadow real observation.

    `determined_*`: the same over the calls whose response the Rehearse prompt determines — with
    few-shot on, a call identical (name and arguments) to one of the task's reference calls, whose
    response the prompt shows. Other calls (wrong arguments, extra calls) have no determinable
    response at this scale, so their exact match measures guessing, not rehearsal."""
    pairs, determined, errors = [], [], []
    for t in trajs:
        known = [(n, a) for n, a, _ in few_shot_triples(t.task)] if few_shot else []
        for u in t.turns_of(Role.REHEARSE):
            if u.real_observation is None or u.call is None:
                continue
            m = turn_fidelity(u)  # the verdict the store keeps for the same turn
            pairs.append((u.call.name, m))
            errors.append((u.call.name, *turn_error_verdict(u)))  # type: ignore[misc]  # real_observation set
            if (u.call.name, u.call.arguments) in known:
                determined.append(m)
    if not pairs:
        return {"pairs": 0}
    keys = ("json_valid", "schema_ok", "exact_match", "field_f1")
    overall = {k: _mean([float(p[k]) for _, p in pairs]) for k in keys}
    det = {f"determined_{k}": _mean([float(p[k]) for p in determined]) for k in keys}
    per_tool = {name: asdict(v) for name, v in aggregate_by_tool(pairs).items()}
    error_prediction = {name: {"n": v.n, "tp": v.tp, "fp": v.fp, "fn": v.fn, "precision": v.precision,
                               "recall": v.recall} for name, v in aggregate_errors(errors).items()}
    return {"pairs": len(pairs), **overall, "determined_pairs": len(determined), **det, "per_tool": per_tool,
            "error_prediction": error_prediction}


def _with_temperature(cfg: RolloutConfig, temperature: float) -> RolloutConfig:
    return cfg.model_copy(update={"act": SamplingConfig(**{**cfg.act.model_dump(), "temperature": temperature})})


def _without_own_gold(tasks: list[Task], few_shot_tasks: list[Task] | None) -> list[Task]:
    """Copies of `tasks` whose Rehearse few-shot comes from training tasks, never from their own gold."""
    from envace.roles.rehearse import with_training_few_shot

    if few_shot_tasks is None:
        from envace.worlds.generator import generate_tasks

        few_shot_tasks = generate_tasks(FEW_SHOT_POOL, "train", 0)
    return with_training_few_shot(tasks, few_shot_tasks)


def evaluate_world(engine: GenerationEngine | Mapping[Role, GenerationEngine], tasks: list[Task],
                   rollout: RolloutConfig, *, k: int = 1,
                   seeds: list[int] = (0,), temperature: float | None = None, with_fidelity: bool = True,
                   tts: TTSConfig | None = None,
                   on_trajectories: Callable[[str, int, list[Trajectory]], None] | None = None,
                   few_shot_tasks: list[Task] | None = None,
                   simulator: GenerationEngine | None = None) -> dict[str, Any]:
    """Evaluate `engine` on `tasks`; returns mean and per-seed scores, every episode's success and reward
    (`per_task`: [tasks][seeds x k], seed-major) and fidelity. `engine` may be
    `{Role.ACT: e1, Role.REHEARSE: e2}` (the per-role-policy ablation; not with test-time rehearsal, `tts`
    with n > 0: envace.tts.rollout).
    `on_trajectories(pass, seed, trajectories)` sees each seed's scored episodes (pass "env") and its
    rehearse-mode fidelity pass (pass "fidelity"), e.g. to store them. The fidelity pass never shows
    Rehearse a test task's own gold pairs: its few-shot examples come from `few_shot_tasks` (default:
    the world's training split, as the reference code draws few-shot from the training sample).
    `simulator` (with `tts.engine=simulator`): the engine of the private phase's tool responses."""
    tts = tts or TTSConfig()
    if isinstance(engine, Mapping) and tts.on:
        raise ValueError("test-time rehearsal (tts.n > 0) needs one shared engine, not a per-role mapping")
    from envace.worlds.environment import WorldEnvironment

    cfg = rollout if temperature is None else _with_temperature(rollout, temperature)
    per_seed = []
    # per (task, sample) outcome, columns seed-major as `envace.evaluation.paired.TaskScores`
    n_samples = len(seeds) * k
    task_success: list[list[float | None]] = [[None] * n_samples for _ in tasks]
    task_reward: list[list[float | None]] = [[None] * n_samples for _ in tasks]
    fid_trajs: list[Trajectory] = []
    fid_tasks = _without_own_gold(tasks, few_shot_tasks) if with_fidelity and cfg.few_shot else tasks
    for col, seed in enumerate(seeds):
        if tts.on:
            # k attempts per task, each with its own derived seed (private and committed phases alike)
            trajs = tts_rollout(tasks, engine, cfg, tts, WorldEnvironment, seed, k=k, simulator=simulator)
        else:
            trajs = run_rollout(tasks, k=k, policy=engine, cfg=cfg, mode=Mode.ENV, env_factory=WorldEnvironment,
                                seed=seed)
        per_seed.append(score_episodes(trajs))
        for t in trajs:
            task_success[t.prompt_index][col * k + t.sample_index] = float(t.reward_breakdown.get("success") or 0.0)
            task_reward[t.prompt_index][col * k + t.sample_index] = float(t.reward or 0.0)
        if on_trajectories is not None:
            on_trajectories("env", seed, trajs)
        if with_fidelity:
            fid = run_rollout(fid_tasks, k=1, policy=engine, cfg=cfg, mode=Mode.REHEARSE,
                              shadow_env_factory=WorldEnvironment, seed=seed)
            fid_trajs += fid
            if on_trajectories is not None:
                on_trajectories("fidelity", seed, fid)
    missing = sum(v is None for row in task_success for v in row)
    if missing:
        raise RuntimeError(f"{missing} (task, sample) cells of {len(tasks)} tasks x {n_samples} samples got no episode")
    out: dict[str, Any] = {
        "success": _mean([s["success"] for s in per_seed]),
        "reward": _mean([s["reward"] for s in per_seed]),
        "tool_call_validity": _mean([s["tool_call_validity"] for s in per_seed]),
        "success_per_seed": [s["success"] for s in per_seed],
        "reward_per_seed": [s["reward"] for s in per_seed],
        "success_seed_std": statistics.pstdev([s["success"] for s in per_seed]) if len(per_seed) > 1 else 0.0,
        "per_domain": per_seed[0]["per_domain"] if len(per_seed) == 1 else _merge_domains(per_seed),
        "tasks": len(tasks), "k": k, "seeds": list(seeds), "temperature": cfg.act.temperature,
        "tts": {"n": tts.n, "mode": tts.mode.value, "memory": tts.memory},
        # every episode's outcome, for paired comparisons between checkpoints on the same tasks and seeds
        "per_task": {"task_ids": [t.uuid for t in tasks], "seeds": list(seeds), "k": k,
                     "success": task_success, "reward": task_reward},
    }
    if with_fidelity:
        out["fidelity"] = fidelity(fid_trajs, few_shot=cfg.few_shot)
    return out


def _merge_domains(per_seed: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    doms = per_seed[0]["per_domain"].keys()
    return {d: {k: _mean([s["per_domain"][d][k] for s in per_seed]) for k in per_seed[0]["per_domain"][d]}
            for d in doms}


def dumps(result: dict[str, Any]) -> str:
    return json.dumps(result, indent=2, default=str)
