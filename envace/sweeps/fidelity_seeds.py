"""Seed-level fidelity readings of a world-model sweep, and whether behaviour-level fidelity orders the arms
as string fidelity does.

Per cell the sweep holds one number per metric (`metrics` of its record): task success and reward on the
held-out tasks, string fidelity of its world model on worldbench (leaf F1, exact match) and behaviour fidelity
(BehR's mean |Δ| and share within tolerance with a frozen Act; WM2Real's success and end-state agreement).
The unit of inference is the training run (the RL seed), as in `envace.sweeps.paired_report`:
- **gain** (`fidelity_gains`): per trained arm and metric, the per-seed difference between the arm's cell of
  seed s and the base row (no RL) of the model it started from with seed s, its mean, the Student t 95 %
  interval over seeds (`envace.evaluation.seed_level.t_test`) and how many seeds lie on the better side;
- **order** (`arm_order`): every pair of trained arms from the same start, per metric, the per-seed difference
  on their shared seeds, t over seeds, Holm over the pairs of one metric. A pair is *ordered* by a metric when
  the adjusted test rejects at 0.05. Against leaf F1, each pair of arms is concordant (both metrics order it,
  the same arm better), discordant (both order it, opposite arms better) or not decided by one of them;
  Kendall's tau between the two metrics' rankings of the arm means is printed beside it, descriptive only.
"Behaviour fidelity orders the arms differently from leaf F1" needs a discordant pair; without one the report
says which pairs neither metric decides.

Departure from worldbench's own intervals (bootstrap over transitions, the checkpoint fixed): here the
trained models vary, so only the seeds give the interval; with 3 seeds it is wide by construction.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from itertools import combinations
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    import pandas as pd


class Reading(NamedTuple):
    metric: str
    label: str
    higher_is_better: bool


READINGS = (
    Reading("eval/world/success", "task success", True),
    Reading("eval/world/reward", "task reward", True),
    Reading("worldbench/all/leaf_f1", "leaf F1", True),
    Reading("worldbench/all/exact", "exact", True),
    Reading("worldbench/all/behr_abs_delta", "BehR |Δ|", False),
    Reading("worldbench/all/behr_within_tol", "BehR within tol", True),
    Reading("worldbench/world/wm2real_success_agree", "WM2Real success agree", True),
    Reading("worldbench/world/wm2real_end_state_agree", "WM2Real end-state agree", True),
)
STRING_READING = "worldbench/all/leaf_f1"
ALPHA = 0.05
GAIN_COLUMNS = ["arm", "base", "seeds", "metric", "label", "diff", "lo", "hi", "better_seeds", "n"]
PAIR_COLUMNS = ["a", "b", "seeds", "metric", "label", "diff", "lo", "hi", "p", "p_holm", "better"]


def _value(record: Mapping[str, Any], metric: str) -> float:
    v = record.get("metrics", {}).get(metric)
    return float(v) if v is not None else math.nan


def _trained(records: Sequence[Mapping[str, Any]]) -> dict[tuple[str, str], dict[int, Mapping[str, Any]]]:
    """{(start model, arm name): {seed: record}} of the trained cells; the arm name is the group, followed by
    ' @ <start model>' when the sweep trains from several starts (model scale, SFT starts)."""
    starts = {str(r.get("start_model") or "") for r in records if r.get("kind") == "train"}
    out: dict[tuple[str, str], dict[int, Mapping[str, Any]]] = {}
    for r in records:
        if r.get("kind") == "train":
            model = str(r.get("start_model") or "")
            name = str(r["group"]) if len(starts) == 1 else f"{r['group']} @ {model}"
            out.setdefault((model, name), {})[int(r["seed"])] = r
    return out


def _readings(records: Sequence[Mapping[str, Any]]) -> list[Reading]:
    present = {m for r in records for m in r.get("metrics", {})}
    return [x for x in READINGS if x.metric in present]


def fidelity_gains(records: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    """Per trained arm and reading: the arm minus its base row, seed by seed, t over seeds."""
    import pandas as pd

    from envace.evaluation.seed_level import t_test

    bases = {(str(r.get("start_model") or ""), int(r["seed"])): r for r in records if r.get("kind") == "eval"}
    rows = []
    for (model, arm), cells in _trained(records).items():
        seeds = sorted(s for s in cells if (model, s) in bases)
        for reading in _readings(records):
            d = [_value(cells[s], reading.metric) - _value(bases[model, s], reading.metric) for s in seeds]
            d = [x for x in d if x == x]
            if not d:
                continue
            iv, _ = t_test(d)
            better = sum((x > 0) if reading.higher_is_better else (x < 0) for x in d)
            rows.append({"arm": arm, "base": str(bases[model, seeds[0]]["group"]), "seeds": len(d),
                         "metric": reading.metric, "label": reading.label, "diff": iv.mean, "lo": iv.lo,
                         "hi": iv.hi, "better_seeds": better, "n": len(d)})
    return pd.DataFrame(rows, columns=GAIN_COLUMNS)


def arm_pairs(records: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    """Every pair of trained arms of one start, per reading: a − b seed by seed, t over seeds, Holm per reading.
    `better`: the arm the adjusted test puts ahead ('' when it does not reject)."""
    import pandas as pd

    from envace.evaluation.seed_level import holm, t_test

    trained = _trained(records)
    rows = []
    for reading in _readings(records):
        part = []
        for ((ma, a), ca), ((mb, b), cb) in combinations(sorted(trained.items()), 2):
            seeds = sorted(set(ca) & set(cb)) if ma == mb else []
            d = [_value(ca[s], reading.metric) - _value(cb[s], reading.metric) for s in seeds]
            d = [x for x in d if x == x]
            if len(d) < 2:
                continue
            iv, p = t_test(d)
            part.append({"a": a, "b": b, "seeds": len(d), "metric": reading.metric, "label": reading.label,
                         "diff": iv.mean, "lo": iv.lo, "hi": iv.hi, "p": p})
        for row, ph in zip(part, holm([r["p"] for r in part])):
            ahead = (row["diff"] > 0) == reading.higher_is_better
            row.update(p_holm=float(ph), better=(row["a"] if ahead else row["b"]) if ph < ALPHA else "")
        rows += part
    return pd.DataFrame(rows, columns=PAIR_COLUMNS)


def kendall_tau(x: Sequence[float], y: Sequence[float]) -> float:
    """Kendall's tau-a of two equally long score lists (pairs tied in either count as neither)."""
    x, y, n = [float(v) for v in x], [float(v) for v in y], len(x)
    if n < 2:
        return math.nan
    s = sum(((x[i] > x[j]) - (x[i] < x[j])) * ((y[i] > y[j]) - (y[i] < y[j])) for i, j in combinations(range(n), 2))
    return s / (n * (n - 1) / 2)


def arm_order(gains: pd.DataFrame, pairs: pd.DataFrame, *, against: str = STRING_READING) -> list[dict[str, Any]]:
    """Per reading other than `against`: concordant / discordant / undecided pairs of arms and Kendall's tau of
    the arm means (each turned so that higher is better)."""
    out = []
    sign = {x.metric: 1.0 if x.higher_is_better else -1.0 for x in READINGS}
    ref = pairs[pairs["metric"] == against].set_index(["a", "b"])["better"]
    means = gains.pivot_table(index="arm", columns="metric", values="diff")
    for metric in [m for m in dict.fromkeys(pairs["metric"]) if m != against]:
        other = pairs[pairs["metric"] == metric].set_index(["a", "b"])["better"]
        keys = [k for k in other.index if k in ref.index]
        both = [k for k in keys if ref[k] and other[k]]
        both_means = means.reindex(columns=[against, metric]).dropna()  # arms with a gain in both readings
        tau = kendall_tau(both_means[against] * sign[against], both_means[metric] * sign[metric])
        out.append({"metric": metric, "label": next(x.label for x in READINGS if x.metric == metric),
                    "pairs": len(keys), "concordant": sum(ref[k] == other[k] for k in both),
                    "discordant": [f"{k[0]} vs {k[1]}" for k in both if ref[k] != other[k]],
                    "ordered_by_this_only": sum(bool(other[k]) and not ref[k] for k in keys),
                    "ordered_by_string_only": sum(bool(ref[k]) and not other[k] for k in keys),
                    "neither": sum(not ref[k] and not other[k] for k in keys), "kendall_tau": tau,
                    "arms": len(both_means)})
    return out


def markdown_fidelity(gains: pd.DataFrame, order: Sequence[Mapping[str, Any]]) -> str:
    from envace.sweeps.world_model import gain_text

    if gains.empty:
        return "(no seed-level fidelity readings: no trained arm has a base row of its start with the same seed)"
    labels = list(dict.fromkeys(gains["label"]))
    lines = ["Gain over the base row per arm: mean over seeds of (arm − base) with the Student t 95 % interval over "
             "seeds; k/n = seeds on the better side (BehR |Δ|: lower is better).", "",
             "| arm | seeds | " + " | ".join(labels) + " |", "|---|---:|" + "---|" * len(labels)]
    for arm, part in gains.groupby("arm", sort=False):
        cells = {r["label"]: f"{gain_text(r['diff'], r['lo'], r['hi'])} {r['better_seeds']}/{r['n']}"
                 for _, r in part.iterrows()}
        row = " | ".join(cells.get(x, "n/a") for x in labels)
        lines.append(f"| {arm} | {int(part['seeds'].max())} | {row} |")
    if order:
        lines += ["", "Order of the trained arms against leaf F1 (pairs of arms, seed-level t with Holm over the "
                      "pairs of one metric; tau over the arm means, descriptive):", "",
                  "| reading | pairs | concordant | discordant | this only | leaf F1 only | neither | Kendall tau |",
                  "|---|---:|---:|---|---:|---:|---:|---:|"]
        for o in order:
            tau = f"{o['kendall_tau']:+.2f}" if o["kendall_tau"] == o["kendall_tau"] else "n/a"
            lines.append(f"| {o['label']} | {o['pairs']} | {o['concordant']} | {', '.join(o['discordant']) or 0} | "
                         f"{o['ordered_by_this_only']} | {o['ordered_by_string_only']} | {o['neither']} | {tau} |")
    return "\n".join(lines)


def fidelity_report(records: Sequence[Mapping[str, Any]]) -> tuple[pd.DataFrame, pd.DataFrame, str]:
    """(gains, pairs, Markdown of both tables) of the records."""
    gains, pairs = fidelity_gains(records), arm_pairs(records)
    order = arm_order(gains, pairs) if not pairs.empty else []
    return gains, pairs, markdown_fidelity(gains, order)


def write_fidelity(out_dir: str | Path, report: tuple[pd.DataFrame, pd.DataFrame, str]) -> dict[str, Path]:
    """A `fidelity_report` as results/world_model_seeds.md (both tables), world_model_seeds.csv (gains) and
    world_model_pairs.csv."""
    gains, pairs, markdown = report
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {name: out / name for name in ("world_model_seeds.md", "world_model_seeds.csv", "world_model_pairs.csv")}
    gains.to_csv(paths["world_model_seeds.csv"], index=False)
    pairs.to_csv(paths["world_model_pairs.csv"], index=False)
    paths["world_model_seeds.md"].write_text(markdown + "\n")
    return paths
