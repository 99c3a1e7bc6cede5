"""Glue between the trainer and `envace.rewards`: score a batch of trajectories with the configured
source, and give the rollout its turn gate (a failed `required_for_next_turn` item stops the replay of
the next user turn, as in CM2)."""

from __future__ import annotations

from collections.abc import Callable

from envace.rewards.env_reward import RewardSource, score_trajectory
from envace.rewards.rule_judge import rule_turn_gate
from envace.types import Environment, Trajectory


class RewardScorer:
    def __init__(self, source: str, judge=None):
        self.source = RewardSource(source)
        self.judge = judge

    def score(self, trajs: list[Trajectory]) -> None:
        for t in trajs:
            # env-state scoring replays the Act calls on a fresh world: never the rollout's own env
            score_trajectory(t, self.source, judge=self.judge).apply_to(t)

    def turn_gate(self, traj: Trajectory, user_turn: int) -> bool:
        if self.source is RewardSource.CHECKLIST_LLM:
            return True  # the LLM judge scores after the episode; no per-turn gate without a live judge
        return rule_turn_gate(traj.task, traj.messages, user_turn)

    @staticmethod
    def env_factory() -> Callable[[], Environment]:
        from envace.worlds.environment import WorldEnvironment

        return WorldEnvironment
