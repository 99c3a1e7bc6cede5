"""Rehearsal exploitation monitor: how much of a rehearse-mode reward would survive the real world?

After a step's rollout (and never during it: the policy never sees the shadow, the reward never uses it),
each trajectory's answered Act calls are replayed, in order, in a fresh real `WorldEnvironment`. The
trajectory is then scored a second time with every tool message replaced by the real environment's
answer to the same call — the same actions, real observations: the reward it would have earned had the
world answered truthfully. A rising gap (rehearsed − real) is the policy learning to fool its own world
model (e.g. rehearsing success for a call that fails, then being rewarded for the turn).

Only calls that got an answer are replayed (a call past MAX_CALLS, or one cut by the context limit, was
never executed in the episode either). A malformed Act output's error message is kept as it is: it came
from the parser, not from the world. Each Rehearse turn also gets `real_observation` (for the store and
the fidelity metrics `shadow/exact_match` and `shadow/error_recall` / `shadow/error_precision`: did the
rehearsed world say no where the real one did, envace.fidelity.turn_error_verdict).

Departure: the counterfactual keeps the episode's actions; with real answers the policy might have acted
differently afterwards (that trajectory is not sampled: it would be another rollout, and cost as much).

As an arm (`ShadowMonitorArm`, switched on by `shadow_monitor`, None = on for world tasks in a rehearsed mode):
`on_batch` replays every generated trajectory of the step (dropped groups included), `metrics` logs `shadow/*`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

from envace.fidelity import aggregate_errors, turn_error_verdict, turn_fidelity
from envace.trainers.arms.base import Arm, StepContext
from envace.types import ErrorCode, Message, Observation, Role, ToolCall, Trajectory


@dataclass
class ShadowResult:
    rehearsed: float | None  # the reward the trajectory was trained on
    real: float | None  # the same trajectory scored with the real answers
    calls: int  # calls replayed in the real world
    exact: list[float]  # per replayed call: 1.0 when the rehearsed answer equals the real one

    @property
    def gap(self) -> float | None:
        if self.rehearsed is None or self.real is None:
            return None
        return self.rehearsed - self.real


def _execute(env, call: ToolCall) -> Observation:
    try:
        return env.execute(call)
    except Exception as exc:  # the call comes from the model: a raising tool is a TOOL_ERROR answer
        return Observation(content=None, source=Role.ENV, error=ErrorCode.TOOL_ERROR,
                           detail=f"{call.name} raised {type(exc).__name__}: {exc}")


def real_messages(traj: Trajectory, env) -> tuple[list[Message], list[Observation]]:
    """The trajectory's messages with each answered call's tool message replaced by `env`'s answer
    (calls executed in the order they were answered); returns the messages and the real observations."""
    out: list[Message] = []
    queue: list[ToolCall] = []
    real: list[Observation] = []
    for m in traj.messages:
        if m.role == "assistant":
            queue = list(m.tool_calls)
        elif m.role == "tool" and m.name is not None and queue:
            obs = _execute(env, queue.pop(0))
            real.append(obs)
            m = dataclasses.replace(m, content=obs.to_text())
        out.append(m)
    return out, real


def shadow_replay(traj: Trajectory, score: Callable[[Trajectory], float | None],
                  env_factory: Callable[[], object]) -> ShadowResult:
    """Replay `traj` in a fresh real environment, attach `real_observation` to its Rehearse turns and
    return the rehearsed and real rewards. `score` must be the training reward's scorer."""
    env = env_factory()
    env.reset(traj.task)
    messages, real = real_messages(traj, env)
    answered = [u for u in traj.turns_of(Role.REHEARSE) if u.call is not None]
    exact = []
    for turn, obs in zip(answered, real):
        turn.real_observation = obs
        exact.append(float(turn_fidelity(turn)["exact_match"]))
    counterfactual = dataclasses.replace(traj, messages=messages, turns=list(traj.turns), reward=None,
                                         reward_breakdown={})
    return ShadowResult(rehearsed=traj.reward, real=score(counterfactual), calls=len(real), exact=exact)


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else 0.0


def shadow_metrics(trajs: list[Trajectory], results: list[ShadowResult]) -> dict[str, float]:
    """Per step, overall and per role: mean rehearsed reward, mean real reward and their gap, over the
    trajectories scored both ways. A role's means run over the trajectories that hold a turn of that role
    (Rehearse turns exist only in trajectories that made calls)."""
    m: dict[str, float] = {}
    both = [(t, r) for t, r in zip(trajs, results) if r.gap is not None]
    groups = {"shadow": both}
    for role in (Role.ACT, Role.REHEARSE):
        groups[f"shadow/{role.value}"] = [(t, r) for t, r in both if t.turns_of(role)]
    for prefix, pairs in groups.items():
        m[f"{prefix}/reward_rehearsed"] = _mean([r.rehearsed for _, r in pairs])
        m[f"{prefix}/reward_real"] = _mean([r.real for _, r in pairs])
        m[f"{prefix}/gap"] = _mean([r.gap for _, r in pairs])
        m[f"{prefix}/trajectories"] = float(len(pairs))
    m["shadow/env_calls"] = float(sum(r.calls for r in results))
    m["shadow/exact_match"] = _mean([x for r in results for x in r.exact])
    verdicts = [(t.call.name if t.call else "", *v) for traj in trajs for t in traj.turns_of(Role.REHEARSE)
                if (v := turn_error_verdict(t)) is not None]
    errors = aggregate_errors(verdicts).get("all")
    if errors is not None:
        m["shadow/errors_real"] = float(errors.tp + errors.fn)
        m["shadow/errors_rehearsed"] = float(errors.tp + errors.fp)
        if errors.recall is not None:
            m["shadow/error_recall"] = errors.recall
        if errors.precision is not None:
            m["shadow/error_precision"] = errors.precision
    return m


class ShadowMonitorArm(Arm):
    """`TrainConfig.shadow_enabled` (the resolved `shadow_monitor` switch)."""

    found: dict[str, float] | None = None  # the current step's metrics, set by on_batch

    @classmethod
    def switched_on(cls, cfg) -> bool:
        return cfg.shadow_enabled

    def on_batch(self, ctx: StepContext) -> None:
        from envace.worlds.environment import WorldEnvironment

        assert ctx.batch is not None and ctx.scorer is not None
        trajs = ctx.batch.generated
        self.found = shadow_metrics(trajs, [shadow_replay(t, ctx.scorer.reward_of, WorldEnvironment) for t in trajs])

    def metrics(self, ctx: StepContext, updates: dict) -> dict[str, float]:
        return dict(self.found or {})
