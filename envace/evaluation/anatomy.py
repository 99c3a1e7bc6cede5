"""Where the RL headroom is: an anatomy of K sampled episodes per task.

GRPO learns only from groups whose K outcomes differ, and only what the policy can already half-do.
For K episodes per task this reports
- the group composition: tasks whose K episodes all succeed, all fail, or are mixed (only mixed
  groups carry a success signal), overall and per task shape;
- for each failing episode of a mixed group, its *divergence token*: the first Act token at which it
  leaves the token prefix of every successful episode of its group, with the probability the policy
  gave the token it sampled there and the one a successful sibling sampled at the same position.
A divergence where both probabilities sit near 1/m for m alternatives (e.g. ~0.2 for five weekdays) is a
guess, a capability the policy lacks; one where the failing token is rare (p < 0.05) and the successful
one likely is a sampling slip that sharpening (what RL does first) removes.
Success is the verified end state (`reward_breakdown["success"]`); the probabilities are the sampling
engine's own log-probs at the episode's Act temperature.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from envace.types import Role, Trajectory


@dataclass(frozen=True)
class Divergence:
    shape: str
    token: int          # the failing episode's token at the divergence
    p_failing: float    # the policy's probability of that token
    p_success: float    # a successful sibling's probability of its own token at the same position


@dataclass
class Anatomy:
    groups: int = 0
    all_success: int = 0
    all_fail: int = 0
    mixed: int = 0
    shape_success: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    shape_mixed: Counter = field(default_factory=Counter)
    divergences: list[Divergence] = field(default_factory=list)

    def summary(self, decode: Callable[[int], str] | None = None, top: int = 12) -> dict[str, Any]:
        pf = np.array([d.p_failing for d in self.divergences])
        ps = np.array([d.p_success for d in self.divergences])
        q = (0.1, 0.25, 0.5, 0.75, 0.9)
        tokens = Counter((d.shape, decode(d.token) if decode else d.token) for d in self.divergences)
        return {
            "groups": self.groups, "all_success": self.all_success, "all_fail": self.all_fail, "mixed": self.mixed,
            "mixed_share": self.mixed / max(self.groups, 1),
            "success_by_shape": {s: round(float(np.mean(v)), 3) for s, v in sorted(self.shape_success.items())},
            "mixed_groups_by_shape": dict(sorted(self.shape_mixed.items())),
            "divergences": len(self.divergences),
            "p_failing_quantiles": dict(zip(map(str, q), np.quantile(pf, q).round(3).tolist())) if len(pf) else {},
            "p_success_quantiles": dict(zip(map(str, q), np.quantile(ps, q).round(3).tolist())) if len(ps) else {},
            "slip_share": float((pf < 0.05).mean()) if len(pf) else math.nan,  # failing token was rare
            "top_divergence_tokens": [[s, t, n] for (s, t), n in tokens.most_common(top)],
        }


def _act_stream(traj: Trajectory) -> list[tuple[int, float]]:
    """(token, log-prob) of every Act token of the episode, in order."""
    return [(tok, lp) for turn in traj.turns_of(Role.ACT) for tok, lp in zip(turn.response_ids, turn.logprobs)]


def _common_prefix(a: Sequence[tuple[int, float]], b: Sequence[tuple[int, float]]) -> int:
    n = 0
    for (x, _), (y, _) in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def first_divergence(failing: Sequence[tuple[int, float]],
                     successes: Sequence[Sequence[tuple[int, float]]]) -> tuple[int, float, float] | None:
    """(position, p of the failing token, p of the successful sibling's token) at the first Act token where
    `failing` leaves the prefix of every success; None when it never does (it is a prefix of one, or ends
    where one goes on: the failure was not in the Act tokens, e.g. a later observation)."""
    best, sibling = -1, None
    for s in successes:
        n = _common_prefix(failing, s)
        if n > best:
            best, sibling = n, s
    if sibling is None or best >= len(failing) or best >= len(sibling):
        return None
    return best, math.exp(failing[best][1]), math.exp(sibling[best][1])


def _success(traj: Trajectory) -> bool:
    return bool(traj.reward_breakdown.get("success"))


def anatomy(trajectories: Sequence[Trajectory]) -> Anatomy:
    """Group `trajectories` by task (`prompt_index`) and dissect them; every group needs >= 2 episodes."""
    groups: dict[int, list[Trajectory]] = defaultdict(list)
    for t in trajectories:
        groups[t.prompt_index].append(t)
    out = Anatomy()
    for _, group in sorted(groups.items()):
        shape = str(group[0].task.meta.get("shape", group[0].task.domain or "?"))
        wins = [_success(t) for t in group]
        out.groups += 1
        out.shape_success[shape].extend(float(w) for w in wins)
        if all(wins):
            out.all_success += 1
            continue
        if not any(wins):
            out.all_fail += 1
            continue
        out.mixed += 1
        out.shape_mixed[shape] += 1
        good = [_act_stream(t) for t, w in zip(group, wins) if w]
        for t, w in zip(group, wins):
            if w:
                continue
            stream = _act_stream(t)
            hit = first_divergence(stream, good)
            if hit is not None:
                pos, pf, ps = hit
                out.divergences.append(Divergence(shape, stream[pos][0], pf, ps))
    return out
