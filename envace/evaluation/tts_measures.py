"""Measures of the test-time-rehearsal diagnosis (envace.evaluation.tts_diagnosis): pure functions of finished,
scored committed episodes, so each one can be checked on hand-made trajectories.

- `placebo_memories`: the placebo bounds' notes. `empty`: the memory header over an empty body;
  `other`: another task's memory (the next task in order with a non-empty one, repeated as needed) cut to
  this task's memory length in characters, so the prompt grows as much as with the real memory but says
  nothing about this task. A task whose own memory is empty gets an empty body in both.
- `paired_vs_base`: a condition against N = 0 on the same tasks and sampling seeds (envace.evaluation.paired:
  per-task differences, paired bootstrap over tasks); the unit is the task, the checkpoint held fixed.
- `first_action`: the first Act output of an episode as comparable text (its calls, or that it made none).
- `prompt_stats`: first Act prompt length in tokens (median, p95) and the share of episodes the context
  guard cut (TerminationReason.CONTEXT_LIMIT).
- `memory_quality`: does the memory name the tools, and the argument values, of the gold calls of the first
  user turn (the turn the private phase rehearses)? A case-insensitive substring test, so a short value can
  be named by accident; tasks with no gold call in that turn are left out.
- `reading`: one sentence derived from the rows' intervals, never a fixed conclusion.
None of this is in the paper; it is the project's instrument for asking why rehearsal helps or hurts.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from envace.evaluation.paired import TaskScores, compare
from envace.types import Role, TerminationReason, Trajectory

PLACEBO_KINDS = ("empty", "other")


def placebo_memories(memories: list[str], kind: str) -> list[str]:
    """The placebo note body for each task (module docstring); `memories[p]` is task p's own memory."""
    if kind not in PLACEBO_KINDS:
        raise ValueError(f"placebo kind {kind!r} is not one of {list(PLACEBO_KINDS)}")
    if kind == "empty":
        return [""] * len(memories)
    out = []
    for p, own in enumerate(memories):
        size = len(own.strip())
        donors = [memories[(p + j) % len(memories)].strip() for j in range(1, len(memories))]
        donor = next((d for d in donors if d), "")
        if not size or not donor:
            out.append("")
            continue
        text = donor
        while len(text) < size:
            text = f"{text} {donor}"
        out.append(text[:size])
    return out


def paired_vs_base(base: TaskScores, other: TaskScores, *, n_boot: int = 10_000, seed: int = 0) -> dict[str, Any]:
    """`other` - `base` (success and reward): mean, paired bootstrap 95 % interval over tasks, paired t."""
    cmp = compare(base, other, n_boot=n_boot, seed=seed)
    out: dict[str, Any] = {"unit": "tasks (checkpoint fixed)", "tasks": cmp["tasks"], "samples": cmp["samples"]}
    for m in ("success", "reward"):
        c = cmp[m]
        out[m] = {"value": c["other"], "diff": c["diff"], "lo": c["boot_lo"], "hi": c["boot_hi"],
                  "t_lo": c["t_lo"], "t_hi": c["t_hi"]}
    return out


def first_action(traj: Trajectory) -> str:
    """The episode's first Act output: its calls as canonical JSON, or '(no call)' / '(invalid call)'."""
    acts = traj.turns_of(Role.ACT)
    if not acts:
        return "(no act)"
    first = acts[0]
    if first.tool_calls:
        return json.dumps([[c.name, c.arguments] for c in first.tool_calls], sort_keys=True, default=str)
    return "(invalid call)" if first.parse_error is not None and first.parse_error.value != "no_tool_call" \
        else "(no call)"


def agreement(a: list[str], b: list[str]) -> float:
    """Share of paired episodes whose first actions are equal."""
    if len(a) != len(b) or not a:
        raise ValueError(f"first-action agreement needs paired, non-empty lists: {len(a)} vs {len(b)}")
    return sum(x == y for x, y in zip(a, b)) / len(a)


def prompt_stats(trajs: list[Trajectory]) -> dict[str, float]:
    """First Act prompt length (tokens: median, p95) and the share of episodes cut by the context guard."""
    firsts = [len(acts[0].prompt_ids) for t in trajs if (acts := t.turns_of(Role.ACT))]
    cut = [t.termination is TerminationReason.CONTEXT_LIMIT for t in trajs]
    return {"prompt_median": float(np.median(firsts)) if firsts else 0.0,
            "prompt_p95": float(np.percentile(firsts, 95)) if firsts else 0.0,
            "context_cut": float(np.mean(cut)) if cut else 0.0}


def _scalars(value: Any) -> list[str]:
    if isinstance(value, dict):
        return [s for v in value.values() for s in _scalars(v)]
    if isinstance(value, list):
        return [s for v in value for s in _scalars(v)]
    if isinstance(value, bool) or value is None:
        return []
    return [str(value)]


def memory_quality(memory: str, traj: Trajectory) -> tuple[float, float] | None:
    """(share of the first user turn's gold tool names the memory names, share of their argument values);
    None when that turn has no gold call."""
    gold = traj.task.gold_calls()
    calls = gold[0] if gold else []
    if not calls:
        return None
    low = memory.lower()
    names = sorted({c.name for c in calls})
    values = sorted({v for c in calls for v in _scalars(c.arguments) if v.strip()})
    tools = sum(n.lower() in low for n in names) / len(names)
    args = sum(v.lower() in low for v in values) / len(values) if values else float(tools == 1.0)
    return tools, args


def _holds_zero(d: dict[str, Any]) -> bool:
    return d["lo"] <= 0 <= d["hi"]


def _fmt(d: dict[str, Any]) -> str:
    return f"{d['diff']:+.3f} [{d['lo']:+.3f}, {d['hi']:+.3f}]"


def reading(rows: list[dict[str, Any]], metric: str = "success",
            contrasts: dict[str, dict[str, Any]] | None = None) -> str:
    """One sentence on what the rows show about `metric`, derived from their paired intervals vs N = 0.

    The rehearsal row read is the one with the lowest mean difference; the oracle and placebo rows are
    then read against it: a placebo whose interval lies below 0 says the prompt change alone costs; an
    oracle whose interval holds 0 or lies above says true world responses remove the loss (so what is
    rehearsed is at fault); an oracle below 0 says rehearsing the real world does not help either.
    `contrasts` (name -> paired comparison) are quoted last: what the memory adds over a placebo."""
    tts = [r for r in rows if r.get("kind") == "tts" and metric in r.get("paired", {})]
    if not tts:
        return "No rehearsal row was measured; nothing to read."
    worst = min(tts, key=lambda r: r["paired"][metric]["diff"])
    d = worst["paired"][metric]
    unit = f"{d.get('tasks', worst['paired'].get('tasks'))} tasks, checkpoint fixed"
    if _holds_zero(d):
        return (f"{worst['name']} vs N=0: no {metric} difference detected within ±{(d['hi'] - d['lo']) / 2:.3f} "
                f"({_fmt(d)}, {unit}); the bounds have nothing to explain at this size.")
    direction = "drop" if d["hi"] < 0 else "gain"
    parts = [f"{worst['name']} changes {metric} by {_fmt(d)} vs N=0 ({unit})"]
    by_kind = {r["kind"]: r for r in rows if metric in r.get("paired", {})}
    placebo = [r for r in rows if r.get("kind") == "placebo" and metric in r.get("paired", {})]
    below = [r for r in placebo if r["paired"][metric]["hi"] < 0]
    if direction == "drop" and below:
        p = min(below, key=lambda r: r["paired"][metric]["diff"])
        parts.append(f"the prompt change alone costs too ({p['name']}: {_fmt(p['paired'][metric])})")
    elif direction == "drop" and placebo:
        parts.append("no placebo row's interval lies below 0 ("
                     + "; ".join(f"{r['name']} {_fmt(r['paired'][metric])}" for r in placebo) + ")")
    oracle = by_kind.get("oracle")
    if oracle is not None and direction == "drop":
        o = oracle["paired"][metric]
        if o["hi"] < 0:
            parts.append(f"rehearsing against the real world drops as well ({_fmt(o)}), so rehearsal fidelity "
                         "does not explain the drop")
        else:
            parts.append(f"with the world's true responses no drop is detected ({_fmt(o)}), pointing at what "
                         "is rehearsed")
    for name, c in (contrasts or {}).items():
        if "placebo" in name and metric in c:
            x = c[metric]
            said = (f"no difference detected within ±{(x['hi'] - x['lo']) / 2:.3f}" if _holds_zero(x)
                    else f"{x['diff']:+.3f} [{x['lo']:+.3f}, {x['hi']:+.3f}]")
            parts.append(f"{name}: {said}")
    return "; ".join(parts) + "."
