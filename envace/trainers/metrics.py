"""Per-step, per-role training metrics (flat `role/name` keys, as logged to MLflow).

Role metrics: reward of the trajectories the role's rows come from, advantage mean/std, clip fraction,
KL, entropy, tokens; Act: tool-call validity (share of Act outputs that parsed or were final replies);
Rehearse: parse-error rate (share of rehearsed results that were not valid `<execution_result>` JSON).
"""

from __future__ import annotations

import math
from collections import Counter

from envace.trainers.train_rows import TrainRow
from envace.types import ErrorCode, Role, Trajectory


def _mean_std(xs: list[float]) -> tuple[float, float]:
    if not xs:
        return 0.0, 0.0
    m = sum(xs) / len(xs)
    return m, math.sqrt(sum((x - m) ** 2 for x in xs) / len(xs))


REHEARSE_PARSE_ERRORS = {ErrorCode.NO_EXECUTION_RESULT_TAG, ErrorCode.RESULT_JSON_DECODE, ErrorCode.RESULT_EMPTY}


def step_metrics(trajs: list[Trajectory], rows: list[TrainRow], updates: dict, t_rollout: float,
                 t_step: float, generated: list[Trajectory] | None = None) -> dict[str, float]:
    """`trajs`: the trajectories trained on; `generated`: every trajectory rolled out this step (more
    than `trajs` under dynamic sampling; default `trajs`). Reward, termination and env-call metrics
    describe the generated ones (an unbiased sample of the policy: the kept groups are selected for
    disagreement); role metrics describe the rows trained on. `reward/kept_mean`: the trained-on reward."""
    generated = trajs if generated is None else generated
    scored = [t.reward for t in generated if t.reward is not None]
    m: dict[str, float] = {}
    m["reward/mean"], m["reward/std"] = _mean_std(scored)
    m["reward/kept_mean"] = _mean_std([t.reward for t in trajs if t.reward is not None])[0]
    m["reward/unscored"] = float(len(generated) - len(scored))
    by_prompt: dict[int, list[float]] = {}
    for t in generated:
        if t.reward is not None:
            by_prompt.setdefault(t.prompt_index, []).append(t.reward)
    m["reward/groups_with_variance"] = (sum(1 for v in by_prompt.values() if max(v) - min(v) > 1e-9)
                                        / max(len(by_prompt), 1))
    for role in (Role.ACT, Role.REHEARSE):
        rr = [r for r in rows if r.role == role]
        key = role.value
        m[f"{key}/rows"] = float(len(rr))
        m[f"{key}/adv_mean"], m[f"{key}/adv_std"] = _mean_std([r.advantage for r in rr])
        finite = [r.reward for r in rr if not math.isnan(r.reward)]
        m[f"{key}/reward"] = _mean_std(finite)[0]
        m[f"{key}/response_tokens"] = float(sum(len(r.response_ids) for r in rr))
    act_turns = [u for t in generated for u in t.turns_of(Role.ACT)]
    reh_turns = [u for t in generated for u in t.turns_of(Role.REHEARSE)]
    if act_turns:
        bad = sum(1 for u in act_turns if u.parse_error not in (None, ErrorCode.NO_TOOL_CALL))
        m["act/tool_call_validity"] = 1.0 - bad / len(act_turns)
    if reh_turns:
        bad_reh = sum(1 for u in reh_turns if u.parse_error in REHEARSE_PARSE_ERRORS)
        m["rehearse/parse_error_rate"] = bad_reh / len(reh_turns)
    for name, upd in updates.items():
        prefix = "" if name == "policy" else f"{name}_model/"
        m[f"{prefix}loss"] = upd.loss
        m[f"{prefix}grad_norm"] = upd.grad_norm
        for k, v in getattr(upd, "metrics", {}).items():  # model-level update stats (helper B's UpdateResult)
            m[f"{prefix}update/{k}"] = v
        for role, vals in upd.role_metrics.items():
            for k, v in vals.items():
                m[f"{role}/{k}"] = v
    for reason, n in Counter(t.termination.value if t.termination else "none" for t in generated).items():
        m[f"termination/{reason}"] = n / len(generated)
    m["env_calls"] = float(sum(t.env_calls for t in generated))
    m["time/rollout_s"] = t_rollout
    m["time/step_s"] = t_step
    return m
