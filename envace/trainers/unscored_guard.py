"""The stop rule for a run that learns nothing because its reward cannot be computed: when more than
`threshold` of a step's episodes are unscored (the LLM judge failed on them) for `patience` consecutive
steps, the run stops with one line naming the judge. Both trainers use it: the embedded loop after each
step's scoring, envace's verl trainer on each batch before its advantages.

Why a stop and not a warning: an unscored episode is left out of the baselines and of the loss (its rows
carry no advantage, and on verl an all-zero loss mask). When every episode of a step is unscored, the
embedded update has no rows and verl's token-mean loss divides by zero tokens: verl skips the step
after a non-finite gradient norm with a printed warning and goes on, so a dead judge would otherwise run
all the configured steps and train nothing.

Departure from a plain threshold: one bad step (a judge restart) is tolerated; only a streak stops the
run. The streak lives in the process: a resumed run starts counting again.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from pydantic import Field

from envace.config import BaseConfig


class UnscoredGuardConfig(BaseConfig):
    threshold: float = Field(0.5, ge=0, le=1, description="Share of a step's episodes left unscored above which "
                                                          "the step counts as failed (1 = never stop).")
    patience: int = Field(3, ge=1, description="Consecutive failed steps that stop the run.")


class UnscoredRunStopped(RuntimeError):
    """The reward judge failed on most episodes for `patience` steps in a row; the message is one line."""


@dataclass
class UnscoredGuard:
    """`observe(step, unscored, total)` once per step; raises `UnscoredRunStopped` on the streak."""

    threshold: float = 0.5
    patience: int = 3
    judge: str = "the reward judge"
    streak: int = 0

    @classmethod
    def from_config(cls, cfg: UnscoredGuardConfig | None, judge: str | None = None) -> UnscoredGuard:
        cfg = cfg or UnscoredGuardConfig()
        return cls(threshold=cfg.threshold, patience=cfg.patience, judge=judge or "the reward judge")

    def observe(self, step: int, unscored: int, total: int) -> float:
        """Record one step; returns its unscored share (0 for a step without episodes)."""
        if not 0 <= unscored <= total:
            raise ValueError(f"unscored episodes {unscored} must lie in [0, total = {total}]")
        share = unscored / total if total else 0.0
        self.streak = self.streak + 1 if share > self.threshold else 0
        if self.streak >= self.patience:
            raise UnscoredRunStopped(
                f"step {step}: {unscored} of {total} episodes unscored ({share:.0%}); {self.streak} steps in a row "
                f"above unscored.threshold {self.threshold:.0%}: the reward judge ({self.judge}) is failing and "
                "the run learns nothing; check that the judge answers (its server log, `curl <base_url>/models`) and "
                "resume, or raise unscored.threshold / unscored.patience")
        return share


def episode_counts(rows: Iterable[tuple[str, bool]]) -> tuple[int, int]:
    """(unscored, total) episodes from (episode id, scored) per training row: an episode is unscored when
    any of its rows is (the trainers mark all rows of an episode alike)."""
    scored: dict[str, bool] = {}
    for episode, ok in rows:
        scored[episode] = scored.get(episode, True) and bool(ok)
    return sum(not ok for ok in scored.values()), len(scored)
