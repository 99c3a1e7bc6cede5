"""Deterministic checklist judge for items that carry a machine-checkable rule in
`extra_info["rule"]`. It reads only the trajectory's messages (the conversation as the Act role saw
it), so it also scores rehearse-mode episodes where no real environment exists.

Rules (within one user turn):
  {"kind": "call", "name": n, "arguments": {...}}  the Act role made that call, arguments exactly equal
  {"kind": "reply_contains", "text": s}             the turn's final reply states s (whole words, any case)
  {"kind": "call_count", "n": k}                    the turn made exactly k calls
  {"kind": "no_call", "name": n}                    the turn made no call to n
An item without a rule (a CM2 item written for an LLM judge) cannot be decided here: the score records
a JudgeFailure instead of guessing.
"""

from __future__ import annotations

import json
from typing import Any

from envace.conversation import TurnView, contains_phrase, split_turns
from envace.rewards.checklist import (
    ChecklistScore,
    ChecklistSet,
    JudgeErrorKind,
    JudgeFailure,
    TurnVerdicts,
    all_checklists,
    judge_failed,
    score_episode,
    turn_gate,
)
from envace.types import ChecklistItem, Message, Task, Trajectory

RULE_KINDS = ("call", "reply_contains", "call_count", "no_call")


class RuleError(ValueError):
    """An item has no rule or a malformed one; the message names the item and the fix."""

    def __init__(self, item_id: str, message: str) -> None:
        super().__init__(message)
        self.item_id = item_id


def _canon(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


def check_rule(rule: Any, turn: TurnView, item_id: str = "?") -> bool:
    if not isinstance(rule, dict) or rule.get("kind") not in RULE_KINDS:
        raise RuleError(item_id, f"checklist item {item_id!r}: extra_info.rule = {rule!r} is not one of the kinds "
                        f"{RULE_KINDS}; give it a rule or score this task with the LLM judge")
    kind = rule["kind"]
    if kind == "call":
        want = _canon(rule.get("arguments", {}))
        return any(c.name == rule.get("name") and _canon(c.arguments) == want for c in turn.calls)
    if kind == "reply_contains":
        return contains_phrase(turn.final_reply, str(rule.get("text", "")))
    if kind == "call_count":
        n = rule.get("n")
        if not isinstance(n, int) or isinstance(n, bool):
            raise RuleError(item_id, f"checklist item {item_id!r}: call_count rule needs an integer 'n', got {n!r}")
        return len(turn.calls) == n
    return all(c.name != rule.get("name") for c in turn.calls)


def judge_turn_items(items: list[ChecklistItem], turn: TurnView) -> dict[str, bool]:
    """item id -> passed for one checklist's items of one turn. Raises RuleError on a rule-less item."""
    return {it.id: check_rule(it.extra_info.get("rule"), turn, it.id) for it in items}


def judge_turn(checklists: list[ChecklistSet], turn: TurnView) -> TurnVerdicts:
    return TurnVerdicts(passed=[judge_turn_items(s[turn.index], turn) for s in checklists],
                        tool_failed=turn.tool_failed)


def rule_turn_gate(task: Task, messages: list[Message], turn_index: int) -> bool:
    """For the rollout: may the user turn after `turn_index` be replayed, given the conversation so far?"""
    sets = all_checklists(task)
    turns = split_turns(messages)
    if not sets or turn_index >= len(turns) or turn_index >= len(sets[0]):
        return True
    v = judge_turn(sets, turns[turn_index])
    return turn_gate([s[turn_index] for s in sets], v.passed)


def score_messages(task: Task, messages: list[Message]) -> ChecklistScore:
    sets = all_checklists(task)
    if not sets:
        raise RuleError("", f"task {task.uuid!r} has no checklists; the rule judge needs one list per user turn")
    for c, s in enumerate(sets):  # decide up front: a rule-less item anywhere makes the score undecidable
        for t, items in enumerate(s):
            for it in items:
                rule = it.extra_info.get("rule")
                if not isinstance(rule, dict) or rule.get("kind") not in RULE_KINDS:
                    msg = (f"checklist {c}, turn {t}, item {it.id!r} has no machine-checkable rule "
                           f"(extra_info.rule = {rule!r}); score this task with the LLM judge")
                    return judge_failed(sets, JudgeFailure(turn=t, item_id=it.id, attempts=0, error=msg,
                                                             kind=JudgeErrorKind.RULE))
    turns = split_turns(messages)[: len(sets[0])]
    verdicts: list[TurnVerdicts] = []
    for turn in turns:
        try:
            verdicts.append(judge_turn(sets, turn))
        except RuleError as exc:
            return judge_failed(sets, JudgeFailure(turn=turn.index, item_id=exc.item_id, attempts=1, error=str(exc),
                                                  kind=JudgeErrorKind.RULE))
    return score_episode(sets, verdicts)


def score_rule(trajectory: Trajectory) -> ChecklistScore:
    """Checklist score of a trajectory from its messages alone."""
    return score_messages(trajectory.task, trajectory.messages)
