"""Reward sources chosen by config: the CM2 checklist judged by rules or by an LLM, or the tool world's
verifiable end state.

The end-state reward needs a real environment. For an env-mode rollout the environment that executed
the calls is passed in and asked directly. For a rehearse- or simulator-mode rollout no real call was
made, so the Act role's calls (as recorded in the trajectory's messages) are replayed on a fresh
WorldEnvironment after the episode; the rehearsed observations play no part in the check. That
replay is an after-the-fact verifier, not an environment the policy could consult during the episode.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from envace.rewards.checklist import ChecklistScore
from envace.rewards.llm_judge import LLMJudge
from envace.rewards.rule_judge import score_rule
from envace.types import Environment, TerminationReason, Trajectory
from envace.worlds.environment import WorldEnvironment


class RewardSource(str, Enum):
    CHECKLIST_RULE = "checklist_rule"
    CHECKLIST_LLM = "checklist_llm"
    ENV_STATE = "env_state"


@dataclass
class RewardResult:
    reward: float | None  # None: unscored (judge error); left out of group baselines
    source: RewardSource
    checklist: ChecklistScore | None = None
    breakdown: dict[str, Any] = field(default_factory=dict)

    @property
    def termination(self) -> TerminationReason | None:
        """The termination the scoring itself implies, if any (judge error, required item failed)."""
        if self.reward is None:
            return TerminationReason.JUDGE_ERROR
        if self.checklist is not None and self.checklist.terminated_at is not None:
            return TerminationReason.REQUIRED_CHECK_FAILED
        return None

    def apply_to(self, trajectory: Trajectory) -> None:
        """Write reward and breakdown onto the trajectory; a judge error overrides its termination."""
        trajectory.reward = self.reward
        trajectory.reward_breakdown = {"source": self.source.value, **self.breakdown}
        if self.reward is None:
            trajectory.termination = TerminationReason.JUDGE_ERROR


def env_state_reward(trajectory: Trajectory, env: Environment | None = None) -> RewardResult:
    """1.0 when the world's end state and the stated answers match the gold ones, else 0.0."""
    if env is None:
        env = WorldEnvironment()
        env.reset(trajectory.task)
        for m in trajectory.messages:
            if m.role == "assistant":
                for call in m.tool_calls:
                    env.execute(call)
    if isinstance(env, WorldEnvironment):
        check = env.final_check(trajectory)
        return RewardResult(check.reward, RewardSource.ENV_STATE, breakdown={
            "state_ok": check.state_ok, "state_diff": check.state_diff[:20],
            "missing_answers": [list(x) for x in check.missing_answers]})
    return RewardResult(float(env.final_reward(trajectory)), RewardSource.ENV_STATE)


def score_trajectory(trajectory: Trajectory, source: RewardSource | str, *, env: Environment | None = None,
                     judge: LLMJudge | None = None) -> RewardResult:
    """Score one trajectory with the configured reward source."""
    try:
        source = RewardSource(source)
    except ValueError:
        raise ValueError(f"reward source {source!r} is not one of {[s.value for s in RewardSource]}") from None
    if source is RewardSource.ENV_STATE:
        return env_state_reward(trajectory, env)
    if source is RewardSource.CHECKLIST_LLM:
        if judge is None:
            raise ValueError("reward source checklist_llm needs judge=LLMJudge(backend); pass one or use "
                             "checklist_rule for tool-world tasks")
        score = judge.score(trajectory)
    else:
        score = score_rule(trajectory)
    return RewardResult(score.score, source, checklist=score, breakdown=score.breakdown())
