"""Rewards: CM2 checklist scoring (rule judge for tool-world items, LLM judge for any checklist) and
the tool world's verifiable end-state reward, selected by `RewardSource`.

Public API:
    score_trajectory(traj, source, *, env=None, judge=None) -> RewardResult
    score_rule(traj) -> ChecklistScore;  LLMJudge(backend).score(traj) -> ChecklistScore
    score_episode(checklists, verdicts) -> ChecklistScore;  turn_gate(items, passed) -> bool
    rule_turn_gate(task, messages, turn_index) -> bool
"""

from envace.rewards.checklist import (
                                      ChecklistScore,
                                      ItemResult,
                                      JudgeFailure,
                                      TurnVerdicts,
                                      all_checklists,
                                      score_episode,
                                      turn_gate,
)
from envace.rewards.env_reward import RewardResult, RewardSource, env_state_reward, score_trajectory
from envace.rewards.llm_judge import ChatBackend, JudgeError, JudgeSettings, LLMJudge
from envace.rewards.rule_judge import RuleError, rule_turn_gate, score_rule

__all__ = [
    "ChecklistScore", "ItemResult", "JudgeFailure", "TurnVerdicts", "all_checklists", "score_episode",
    "turn_gate", "RewardResult", "RewardSource", "env_state_reward", "score_trajectory", "ChatBackend",
    "JudgeError", "JudgeSettings", "LLMJudge", "RuleError", "rule_turn_gate", "score_rule",
]
