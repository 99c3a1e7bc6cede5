"""CM2 checklist scoring as pure functions over typed verdicts.

Per user turn t and checklist (annotation) c: turn score s_{c,t} = Σ_i w_i · passed_i, and 0 when any
tool call in turn t failed (a tool message that `envace.execution_result.is_error_text` calls an error,
whoever wrote it: the real world or Rehearse, in any wording, so the rule is the same in every mode).
A turn whose required_for_next_turn items failed in a majority of the checklists ends the episode: the
next user turn is not replayed and every later turn scores 0 (the last turn ends the episode anyway, so
a failure there is not reported as a termination). Turns that were never reached (the rollout stopped
earlier) score 0. Episode score = Σ_{c,t} s_{c,t} / (C · T) with C checklists and T user turns of the
task — the normalisation of EnvACE's checklist reward manager.

A judge that could not decide an item records a `JudgeFailure`; the score is then None (never a
silent 0) and the episode is to be marked JUDGE_ERROR.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from envace.types import ChecklistItem, Task

# One checklist set: per user turn, its items. A task may carry several sets (CM2 annotations).
ChecklistSet = list[list[ChecklistItem]]


@dataclass(frozen=True)
class TurnVerdicts:
    """The judged outcome of one user turn: per checklist, item id -> passed; and whether any tool call
    of the turn failed."""

    passed: list[dict[str, bool]]
    tool_failed: bool = False


@dataclass(frozen=True)
class ItemResult:
    checklist: int
    turn: int
    item_id: str
    weight: float
    passed: bool
    required: bool


class JudgeErrorKind(str, Enum):
    """Why an item went undecided: the reply was not a verdict, the judge backend failed (endpoint
    unreachable or refusing, local model refusing the request), or the item has no checkable rule."""

    UNPARSEABLE = "unparseable_verdict"
    BACKEND = "backend_failure"
    RULE = "no_rule"


@dataclass(frozen=True)
class JudgeFailure:
    turn: int
    item_id: str
    attempts: int
    error: str
    kind: JudgeErrorKind | None = None  # of the last attempt; None: recorded before kinds existed


@dataclass
class ChecklistScore:
    turn_scores: list[float]  # per user turn, summed over checklists
    items: list[ItemResult] = field(default_factory=list)
    tool_failed: list[bool] = field(default_factory=list)
    terminated_at: int | None = None  # turn whose required item failed (and ended the episode)
    num_checklists: int = 1
    num_turns: int = 0
    score: float | None = 0.0  # normalised to [0, 1]; None when the judge failed
    judge_error: JudgeFailure | None = None

    def breakdown(self) -> dict[str, Any]:
        """JSON-ready record for trajectory storage and dashboards."""
        return {
            "score": self.score, "turn_scores": self.turn_scores, "tool_failed": self.tool_failed,
            "terminated_at": self.terminated_at, "num_checklists": self.num_checklists,
            "num_turns": self.num_turns,
            "items": [{"checklist": r.checklist, "turn": r.turn, "id": r.item_id, "weight": r.weight,
                       "passed": r.passed, "required": r.required} for r in self.items],
            "judge_error": None if self.judge_error is None else {
                **vars(self.judge_error), "kind": self.judge_error.kind and self.judge_error.kind.value},
        }


def all_checklists(task: Task) -> list[ChecklistSet]:
    """Every checklist set of a task: `task.checklists` first, then extra CM2 annotations that the
    loader keeps in `task.meta["cm2_extra_checklists"]` (Task holds one set natively)."""
    extra = task.meta.get("cm2_extra_checklists") or []
    sets = [task.checklists] if task.checklists else []
    for s in extra:
        sets.append([[i if isinstance(i, ChecklistItem) else ChecklistItem(**i) for i in turn] for turn in s])
    return sets


def turn_score(items: list[ChecklistItem], passed: dict[str, bool], tool_failed: bool) -> float:
    if tool_failed:
        return 0.0
    return float(sum(it.weight for it in items if passed.get(it.id, False)))


def required_failed(items: list[ChecklistItem], passed: dict[str, bool]) -> bool:
    return any(it.required_for_next_turn and not passed.get(it.id, False) for it in items)


def turn_gate(items_per_checklist: list[list[ChecklistItem]], passed_per_checklist: list[dict[str, bool]]) -> bool:
    """True when the next user turn may be replayed: the required_for_next_turn items failed in at
    most half of the checklists (CM2's majority rule; with one checklist, any failure stops)."""
    if len(items_per_checklist) != len(passed_per_checklist):
        raise ValueError(f"{len(items_per_checklist)} checklists but {len(passed_per_checklist)} verdict sets")
    failed = sum(required_failed(it, p) for it, p in zip(items_per_checklist, passed_per_checklist, strict=True))
    return 2 * failed <= len(items_per_checklist)


def score_episode(checklists: list[ChecklistSet], verdicts: list[TurnVerdicts]) -> ChecklistScore:
    """Score an episode from per-turn verdicts (fewer verdicts than turns = the rollout stopped early)."""
    if not checklists:
        raise ValueError("no checklists to score; the task needs at least one checklist set")
    num_turns = len(checklists[0])
    for c, s in enumerate(checklists):
        if len(s) != num_turns:
            raise ValueError(f"checklist {c} has {len(s)} turns but checklist 0 has {num_turns}")
    if len(verdicts) > num_turns:
        raise ValueError(f"{len(verdicts)} judged turns but the checklists have only {num_turns}")
    out = ChecklistScore(turn_scores=[0.0] * num_turns, tool_failed=[False] * num_turns,
                         num_checklists=len(checklists), num_turns=num_turns)
    stopped = False
    for t in range(num_turns):
        v = verdicts[t] if t < len(verdicts) and not stopped else None
        passed_sets = v.passed if v is not None else [{} for _ in checklists]
        if len(passed_sets) != len(checklists):
            raise ValueError(f"turn {t}: {len(passed_sets)} verdict sets for {len(checklists)} checklists")
        for c, s in enumerate(checklists):
            for it in s[t]:
                out.items.append(ItemResult(c, t, it.id, it.weight, bool(passed_sets[c].get(it.id, False)),
                                            it.required_for_next_turn))
        if v is None:
            continue
        out.tool_failed[t] = v.tool_failed
        out.turn_scores[t] = sum(turn_score(s[t], p, v.tool_failed) for s, p in zip(checklists, v.passed, strict=True))
        if t < num_turns - 1 and not turn_gate([s[t] for s in checklists], v.passed):
            out.terminated_at = t
            stopped = True
    out.score = sum(out.turn_scores) / (len(checklists) * num_turns) if num_turns else 0.0
    return out


def judge_failed(checklists: list[ChecklistSet], failure: JudgeFailure) -> ChecklistScore:
    num_turns = len(checklists[0]) if checklists else 0
    return ChecklistScore(turn_scores=[0.0] * num_turns, tool_failed=[False] * num_turns,
                          num_checklists=len(checklists), num_turns=num_turns, score=None, judge_error=failure)
