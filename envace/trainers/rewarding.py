"""Glue between the trainer and `envace.rewards`: score a batch of trajectories with the configured
source, and give the rollout its turn gate (a failed `required_for_next_turn` item stops the replay of
the next user turn, as in CM2).

Sources: the `envace.rewards` ones (checklist_rule, checklist_llm, env_state), and `toy`, the diagnostic
reward of `envace.trainers.toy_reward` (no checklist: no turn gate).

checklist_llm: `RewardScorer.from_config` builds the judge once per run from the config's judge slot (a
local model dir served in-process, or an OpenAI-compatible endpoint). A trajectory the judge cannot
score (every attempt at an item unparseable, or the backend failing) gets reward None and termination
JUDGE_ERROR with the classified failure in its reward breakdown; its rows carry NaN and are left out of
the group baselines (envace.algos.advantages), as for any unscored trajectory. `judge_metrics()` gives
the step's judge counters (calls, failed attempts and failed items by kind)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from envace.rewards.env_reward import RewardSource, score_trajectory
from envace.rewards.llm_judge import JudgeSettings, LLMJudge
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
        self.judge_label: str | None = getattr(getattr(judge, "backend", None), "name", None)
        self._judge_seen: dict[str, float] = {}

    @classmethod
    def from_config(cls, cfg: Any, device: str | None = None) -> RewardScorer:
        """The scorer of a `TrainConfig`; for reward=checklist_llm its judge is built here, once (a local judge
        model is loaded on `device`; an endpoint's API key is read from `judge.api_key_env` now)."""
        judge = None
        if cfg.reward == RewardSource.CHECKLIST_LLM.value:
            if cfg.judge is None:  # TrainConfig refuses this already; a hand-built config may not
                raise ValueError("reward='checklist_llm' needs judge= a model slot (judge.model_dir=DIR or "
                                 "judge.base_url=URL judge.model=NAME)")
            backend = cfg.judge.build_judge("judge", device=device)
            judge = LLMJudge(backend, JudgeSettings(attempts=cfg.judge_attempts, base_delay_s=cfg.judge_retry_delay_s,
                                                    temperature=cfg.judge.temperature))
        return cls(cfg.reward, judge=judge, toy_kind=cfg.toy_reward.kind, toy_target=cfg.toy_reward.target)

    def judge_metrics(self) -> dict[str, float]:
        """The judge's counters since the previous call (per step), or {} without an LLM judge."""
        if self.judge is None or not hasattr(self.judge, "metrics"):
            return {}
        now = self.judge.metrics()
        delta = {k: v - self._judge_seen.get(k, 0.0) for k, v in now.items()}
        self._judge_seen = now
        return delta

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
