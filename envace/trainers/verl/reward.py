"""`compute_score` for verl's reward path (`reward.custom_reward_function.path=<this file>`), used only
when the agent loop did not set `reward_score` itself.

The envace agent loop scores every episode and writes the reward on every row, so verl skips its
reward workers. When verl does call a reward function for an envace row (for instance a custom
reward manager, or a loop output without `reward_score`), this one reads the loop's verdict from
`extra_info` — verl merges the last output's `extra_fields` into it (`tool_extra_fields`) — and returns
it with the checklist breakdown as extra metrics. It never re-judges: a row without the loop's
verdict is an error that names the fix, not a silent 0.
"""

from __future__ import annotations

import json
from typing import Any

REWARD_KEY = "envace_reward"
SCORED_KEY = "envace_scored"
BREAKDOWN_KEY = "envace_breakdown"


def _breakdown(extra_info: dict[str, Any]) -> dict[str, Any]:
    raw = extra_info.get(BREAKDOWN_KEY)
    if not raw:
        return {}
    try:
        data = json.loads(raw) if isinstance(raw, str) else dict(raw)
    except (TypeError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def compute_score(data_source: str, solution_str: str, ground_truth: Any, extra_info: dict[str, Any] | None = None,
                  **reward_kwargs: Any) -> dict[str, Any]:
    """verl reward function: {"score": R, "envace_scored": 0|1, "checklist_score": ..., ...}.

    An unscored episode (the judge failed) scores 0.0 with `envace_scored` = 0 (envace's trainer leaves
    such rows out of the baselines); a checklist breakdown adds its normalised score and item pass rate.
    """
    info = extra_info or {}
    if REWARD_KEY not in info and SCORED_KEY not in info:
        raise ValueError(f"extra_info of a {data_source!r} row has no {REWARD_KEY!r}: envace rows are scored by the "
                         "envace_agent loop; select it with the row's agent_name (envace data export) or "
                         "actor_rollout_ref.rollout.agent.default_agent_loop=envace_agent")
    reward = info.get(REWARD_KEY)
    scored = bool(info.get(SCORED_KEY, reward is not None)) and reward is not None
    out: dict[str, Any] = {"score": float(reward) if scored else 0.0, "envace_scored": float(scored)}
    breakdown = _breakdown(info)
    items = breakdown.get("items") or []
    if items:
        out["checklist_item_pass_rate"] = sum(bool(i.get("passed")) for i in items) / len(items)
    if "state_ok" in breakdown:
        out["state_ok"] = float(bool(breakdown["state_ok"]))
    return out
