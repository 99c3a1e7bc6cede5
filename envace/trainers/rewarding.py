"""Glue between the trainer and `envace.rewards`: score a batch of trajectories with the configured
source, and give the rollout its turn gate (a failed `required_for_next_turn` item stops the replay of
the next user turn, as in CM2).

Sources: the `envace.rewards` ones (checklist_rule, checklist_llm, env_state), and `toy`, the diagnostic
reward of `envace.trainers.toy_reward` (no checklist: no turn gate)."""

from __future__ import annotations

from collections.abc import Callable

from envace.rewards.env_reward import RewardSource, score_trajectory
from envace.rewards.rule_judge import rule_turn_gate
from envace.trainers.toy_reward import ToyKind, toy_reward
from envace.types import Environment, Trajectory

TOY = "toy"


class RewardScorer:
    def __init__(self, source: str, judge=None, toy_kind: str = ToyKind.FIRST_CALL_TOOL.value,
                 toy_target: str = "get_balance"):
        self.toy = source == TOY
        self.source = None if self.toy else RewardSource(source)
        self.judge = judge
        self.toy_kind, self.toy_target = ToyKind(toy_kind), toy_target

    @property
    def name(self) -> str:
        return TOY if self.toy else self.source.value

    def reward_of(self, traj: Trajectory) -> float | None:
        """The reward of one trajectory, without writing it anywhere (the shadow monitor's scorer)."""
        if self.toy:
            return toy_reward(traj, self.toy_kind, self.toy_target)
        return score_trajectory(traj, self.source, judge=self.judge).reward

    def score(self, trajs: list[Trajectory]) -> None:
        for t in trajs:
            if self.toy:
                t.reward = toy_reward(t, self.toy_kind, self.toy_target)
                t.reward_breakdown = {"source": TOY, "kind": self.toy_kind.value, "target": self.toy_target}
                continue
            # env-state scoring replays the Act calls on a fresh world: never the rollout's own env
            score_trajectory(t, self.source, judge=self.judge).apply_to(t)

    def turn_gate(self, traj: Trajectory, user_turn: int) -> bool:
        if self.toy or self.source is RewardSource.CHECKLIST_LLM:
            return True  # toy: no checklist; LLM judge: scores after the episode, no live per-turn gate
        return rule_turn_gate(traj.task, traj.messages, user_turn)

    @staticmethod
    def env_factory() -> Callable[[], Environment]:
        from envace.worlds.environment import WorldEnvironment

        return WorldEnvironment
