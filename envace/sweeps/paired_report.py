"""Paired comparisons of a sweep's arms with seed-level inference (one table per evaluation pass).

Every cell's evaluation keeps each episode's outcome (`per_task` of `envace.evaluation.world.evaluate_world`)
on the same held-out tasks, and a cell of RL seed s samples with seed s, so two cells of one replicate (SFT
start, RL seed) can be compared task by task with common random numbers. Comparisons:
- **vs base**: each trained arm against the baseline row (`baselines:`, no RL) of the model it started from:
  per replicate, the eval cell whose model is the train cell's start model and whose seed is its seed;
- **vs reference**: every other trained arm against the first trained one (the sweep's reference level) on
  their shared replicates; when they start from different models (model scale), their gains over their own
  bases are compared instead, per task and sample: (arm - its base) - (reference - its base);
- **contrast**: explicit (arm, comparator) pairs of groups, direct, or gain vs gain when both are trained
  arms from different start models. A contrast that cannot be computed gets a row that says why.
The statistics are `envace.evaluation.seed_level`'s: the unit of inference is the training run (the RL seed;
with several SFT starts, the start), beside the task-only interval that holds the trained models fixed.
Holm's adjustment runs over the comparisons of one pass, each metric its own family. IQM and P(A > B) read
each side's per-run scores (in the gain form, each run's gain over its base).

Record keys read: `group`, `seed`, `kind` ("train" | "eval"), `start_model`, `eval_file`, and the optional
`sft_seed` (the SFT start; absent: 0) and `eval_files` ({pass: path}; absent: {"default": eval_file}).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from envace.evaluation.paired import TaskScores
from envace.evaluation.seed_level import ALPHA, MIN_REPLICATES, Replicate, holm, seed_level, verdict

METRICS = ("success", "reward")
DEFAULT_PASS = "default"
ID_COLUMNS = ["comparison", "kind", "pass", "arm", "comparator", "starts", "seeds", "n", "tasks", "samples"]
STATS = ("diff", "task_lo", "task_hi", "seed_t_lo", "seed_t_hi", "seed_boot_lo", "seed_boot_hi", "k_improved", "p",
         "p_holm", "verdict", "iqm_a", "iqm_b", "poi")
COLUMNS = [*ID_COLUMNS, *[f"{m}_{s}" for m in METRICS for s in STATS]]


@dataclass
class Cell:
    """One finished cell's outcomes per evaluation pass."""
    name: str
    group: str
    kind: str
    start: int
    seed: int
    model: str  # the resolved start model (train) or evaluated model (eval)
    passes: dict[str, TaskScores] = field(default_factory=dict)


def scores_from_file(path: str | Path | None) -> TaskScores | None:
    """The per-episode outcomes of an eval result file (None when it has none)."""
    if not path or not Path(path).is_file():
        return None
    world = json.loads(Path(path).read_text()).get("world") or {}
    per = world.get("per_task")
    if not per:
        return None
    return TaskScores(per["task_ids"], per["seeds"], per["k"], float(world.get("temperature", 0.0)),
                      np.array(per["success"]), np.array(per["reward"]))


def cell_scores(record: Mapping[str, Any]) -> TaskScores | None:
    """The outcomes of a cell's default evaluation (`eval_file`); None when its eval file has none."""
    return scores_from_file(record.get("eval_file"))


def stack(scores: Sequence[TaskScores]) -> TaskScores:
    """One TaskScores holding the given seeds' columns side by side (same tasks, k and temperature)."""
    first = scores[0]
    for s in scores[1:]:
        if s.task_ids != first.task_ids or s.k != first.k or s.temperature != first.temperature:
            raise ValueError("cells evaluated on different tasks, k or temperature cannot be paired")
    return TaskScores(first.task_ids, [x for s in scores for x in s.seeds], first.k, first.temperature,
                      np.concatenate([s.success for s in scores], axis=1),
                      np.concatenate([s.reward for s in scores], axis=1))


def model_key(path: Any) -> str:
    return str(Path(str(path)).resolve()) if path else ""


def _int_field(record: Mapping[str, Any], key: str, default: int | None = None) -> int:
    value = record.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"record of cell {record.get('cell', record.get('group'))!r}: {key} = {value!r} is not an "
                         f"integer; the sweep writes {key} as an int")
    return int(value)


def load_cells(records: Sequence[Mapping[str, Any]]) -> list[Cell]:
    """The cells whose evaluation kept per-episode outcomes, each with every pass that has them."""
    cells = []
    for r in records:
        files = r.get("eval_files") or ({DEFAULT_PASS: r["eval_file"]} if r.get("eval_file") else {})
        passes = {name: s for name, path in files.items() if (s := scores_from_file(path)) is not None}
        if not passes:
            continue
        if r.get("kind") not in ("train", "eval"):
            raise ValueError(f"record of cell {r.get('cell', r['group'])!r}: kind = {r.get('kind')!r}; expected "
                             "'train' or 'eval'")
        cells.append(Cell(str(r.get("cell", f"{r['group']},seed={r['seed']}")), r["group"], r["kind"],
                          _int_field(r, "sft_seed", 0), _int_field(r, "seed"), model_key(r.get("start_model")),
                          passes))
    return cells


@dataclass
class _Pair:
    """One replicate of a comparison: A's and B's cells, and each one's base for the gain form."""
    a: Cell
    b: Cell
    base_a: Cell | None = None
    base_b: Cell | None = None

    def cells(self) -> list[Cell]:
        return [c for c in (self.a, self.b, self.base_a, self.base_b) if c is not None]


@dataclass
class _Comparison:
    name: str
    kind: str
    arm: str
    comparator: str
    pairs: list[_Pair]
    missing: str = ""  # why a requested contrast has no numbers


class _Index:
    def __init__(self, cells: Sequence[Cell]):
        self.groups: dict[str, dict[tuple[int, int], Cell]] = {}
        self.evals: dict[tuple[str, int], list[Cell]] = {}
        for c in cells:
            at = self.groups.setdefault(c.group, {})
            if (c.start, c.seed) in at:
                raise ValueError(f"cells {at[(c.start, c.seed)].name!r} and {c.name!r} are both group {c.group!r} at "
                                 f"SFT start {c.start}, seed {c.seed}; give each run its own sft_seed or seed")
            at[(c.start, c.seed)] = c
            if c.kind == "eval" and c.model:
                self.evals.setdefault((c.model, c.seed), []).append(c)
        self.trained = [g for g, cs in self.groups.items() if next(iter(cs.values())).kind == "train"]

    def base(self, c: Cell, group: str | None = None) -> Cell | None:
        found = [e for e in self.evals.get((c.model, c.seed), []) if group is None or e.group == group]
        return found[0] if found else None

    def pairs(self, arm: str, comp: str) -> tuple[list[_Pair], bool]:
        """The shared replicates of two groups, and whether they need the gain form."""
        a, b = self.groups[arm], self.groups[comp]
        keys = sorted(set(a) & set(b))
        trained = a[keys[0]].kind == b[keys[0]].kind == "train" if keys else False
        if not trained or all(a[k].model == b[k].model for k in keys):
            return [_Pair(a[k], b[k]) for k in keys], False
        pairs = [_Pair(a[k], b[k], self.base(a[k]), self.base(b[k])) for k in keys]
        return [p for p in pairs if p.base_a is not None and p.base_b is not None], True


def _comparisons(ix: _Index, contrasts: Iterable[Sequence[str]]) -> list[_Comparison]:
    out: list[_Comparison] = []
    for arm in ix.trained:  # vs base, one per base group the arm's start models have
        cells = sorted(ix.groups[arm].values(), key=lambda c: (c.start, c.seed))
        for bg in dict.fromkeys(e.group for c in cells for e in ix.evals.get((c.model, c.seed), [])):
            pairs = [_Pair(c, b) for c in cells if (b := ix.base(c, bg)) is not None]
            out.append(_Comparison(f"{arm} − {bg}", "vs base", arm, bg, pairs))

    def between(arm: str, comp: str, kind: str, gain_kind: str) -> _Comparison:
        pairs, gain = ix.pairs(arm, comp)
        if not gain:
            return _Comparison(f"{arm} − {comp}", kind, arm, comp, pairs)
        p = pairs[0] if pairs else None
        ba, bb = (p.base_a.group, p.base_b.group) if p else ("its base", "its base")
        return _Comparison(f"({arm} − {ba}) − ({comp} − {bb})", gain_kind, arm, comp, pairs)

    ref = ix.trained[0] if ix.trained else None
    for arm in ix.trained[1:]:
        out.append(between(arm, ref, "vs reference", "gain vs reference gain"))
    done = {(c.arm, c.comparator) for c in out}
    for item in contrasts:
        if isinstance(item, str) or len(item) != 2:
            raise ValueError(f"contrast {item!r} is not an (arm, comparator) pair of group names")
        arm, comp = (str(x) for x in item)
        if (arm, comp) in done:
            continue
        done.add((arm, comp))
        absent = [g for g in (arm, comp) if g not in ix.groups]
        if absent:
            out.append(_Comparison(f"{arm} − {comp}", "contrast", arm, comp, [],
                                   f"not computed: no finished cell of {' or '.join(absent)} kept per-episode "
                                   "outcomes"))
            continue
        c = between(arm, comp, "contrast", "gain contrast")
        if not c.pairs:
            c.missing = ("not computed: no shared (SFT start, seed) with outcomes on both sides (across start "
                         "models, also a base row of each)")
        out.append(c)
    return out


def _check(x: TaskScores, y: TaskScores, who: str) -> None:
    if x.task_ids != y.task_ids:
        raise ValueError(f"{who}: evaluated on different tasks ({len(x.task_ids)} vs {len(y.task_ids)}); paired "
                         "comparisons need the same held-out tasks in the same order")
    if x.seeds != y.seeds or x.k != y.k or x.temperature != y.temperature:
        raise ValueError(f"{who}: sampling differs ({x.seeds}/k={x.k}/T={x.temperature} vs {y.seeds}/k={y.k}/"
                         f"T={y.temperature}); paired comparisons need the same seeds, k and temperature")


def _replicates(comp: _Comparison, pass_name: str) -> tuple[dict[str, list[Replicate]], list[_Pair]]:
    pairs = [p for p in comp.pairs if all(pass_name in c.passes for c in p.cells())]
    reps: dict[str, list[Replicate]] = {m: [] for m in METRICS}
    first: TaskScores | None = None
    for p in pairs:
        a, b = p.a.passes[pass_name], p.b.passes[pass_name]
        for other, cell in ((b, p.b), *((c.passes[pass_name], c) for c in (p.base_a, p.base_b) if c is not None)):
            _check(a, other, f"{comp.name}, pass {pass_name}: cells {p.a.name!r} and {cell.name!r}")
        if first is not None and first.task_ids != a.task_ids:
            raise ValueError(f"{comp.name}, pass {pass_name}: replicates were evaluated on different tasks; "
                             "every run needs the same held-out tasks")
        first = first or a
        for m in METRICS:
            xa, xb = a.metric(m), b.metric(m)
            if p.base_a is not None and p.base_b is not None:
                xa, xb = xa - p.base_a.passes[pass_name].metric(m), xb - p.base_b.passes[pass_name].metric(m)
            reps[m].append(Replicate(p.a.start, p.a.seed, xa, xb))
    return reps, pairs


def _row(comp: _Comparison, pass_name: str, n_boot: int) -> dict[str, Any] | None:
    row: dict[str, Any] = {c: math.nan for c in COLUMNS}
    row.update(comparison=comp.name, kind=comp.kind, arm=comp.arm, comparator=comp.comparator,
               starts="", seeds="", n=0)
    row["pass"] = pass_name
    if comp.missing:
        row.update({f"{m}_verdict": comp.missing for m in METRICS})
        return row
    reps, pairs = _replicates(comp, pass_name)
    if not pairs:
        return None
    row.update(starts=",".join(map(str, sorted({p.a.start for p in pairs}))),
               seeds=",".join(map(str, sorted({p.a.seed for p in pairs}))), n=len(pairs),
               tasks=len(pairs[0].a.passes[pass_name].task_ids),
               samples=pairs[0].a.passes[pass_name].success.shape[1])
    for m in METRICS:
        r = seed_level(reps[m], n_boot=n_boot)
        row.update({f"{m}_diff": r.diff, f"{m}_task_lo": r.task_only.lo, f"{m}_task_hi": r.task_only.hi,
                    f"{m}_seed_t_lo": r.seed_t.lo, f"{m}_seed_t_hi": r.seed_t.hi, f"{m}_seed_boot_lo": r.seed_boot.lo,
                    f"{m}_seed_boot_hi": r.seed_boot.hi, f"{m}_k_improved": r.k_improved, f"{m}_p": r.p,
                    f"{m}_iqm_a": r.iqm_a, f"{m}_iqm_b": r.iqm_b, f"{m}_poi": r.poi, f"_{m}_result": r})
    return row


def _pass_order(cells: Sequence[Cell]) -> list[str]:
    names = list(dict.fromkeys(p for c in cells for p in c.passes))
    return sorted(names, key=lambda p: p != DEFAULT_PASS)


def paired_table(cells: Sequence[Cell], *, contrasts: Iterable[Sequence[str]] = (), n_boot: int = 10_000
                 ) -> pd.DataFrame:
    """The comparison table of `cells` (module docstring): one row per comparison and pass."""
    ix = _Index(cells)
    comps = _comparisons(ix, contrasts)
    rows = []
    passes = _pass_order(cells) or [DEFAULT_PASS]
    for pass_name in passes:
        part = [r for c in comps if (not c.missing or pass_name == passes[0])
                and (r := _row(c, pass_name, n_boot)) is not None]
        for m in METRICS:  # Holm over this pass's comparisons that can make a seed-level claim
            ps = [r[f"{m}_p"] if r["n"] >= MIN_REPLICATES else math.nan for r in part]
            for r, adj in zip(part, holm(ps)):
                r[f"{m}_p_holm"] = adj
                if f"_{m}_result" in r:
                    r[f"{m}_verdict"] = verdict(r.pop(f"_{m}_result"), adj)
        rows += part
    return pd.DataFrame(rows, columns=COLUMNS)


def paired_report(records: Sequence[Mapping[str, Any]], *, contrasts: Iterable[Sequence[str]] = (),
                  n_boot: int = 10_000) -> pd.DataFrame:
    """The sweep's comparison table from its cell records (empty when no cell kept per-episode outcomes)."""
    cells = load_cells(records)
    if not cells:
        return pd.DataFrame(columns=COLUMNS)
    return paired_table(cells, contrasts=contrasts, n_boot=n_boot)


def _num(x: Any, fmt: str = "+.3f") -> str:
    return "—" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, fmt)


def _iv(lo: Any, hi: Any) -> str:
    return "—" if any(isinstance(v, float) and math.isnan(v) for v in (lo, hi)) else f"[{lo:+.3f}, {hi:+.3f}]"


def header_line(part: pd.DataFrame) -> str:
    """The unit of inference and the Holm family of one pass's table."""
    fams = {m: int(part[f"{m}_p_holm"].notna().sum()) for m in METRICS}
    m_text = (f"m = {fams[METRICS[0]]}" if len(set(fams.values())) == 1
              else ", ".join(f"m = {v} ({k})" for k, v in fams.items()))
    return ("Unit of inference: the training run (RL seed; with several SFT starts, the start, its seeds nested "
            "within it). Δ = A − B, the comparison's left side minus its right, per task, then over tasks and runs. "
            "task-only: bootstrap over tasks, conditional on these trained models; seed-t: Student t over seeds "
            "(starts); seed-boot: bootstrap over seeds, then tasks within each seed. k/n: runs with Δ > 0. "
            f"Holm over the {m_text} comparisons of this table (each metric its own family), α = {ALPHA}; "
            f"fewer than {MIN_REPLICATES} runs: no seed-level claim.")


def markdown_paired(table: pd.DataFrame) -> str:
    """One Markdown table per evaluation pass, each under its header line."""
    if table.empty:
        return "(no paired comparisons: no cell kept per-episode outcomes)"
    out = []
    for pass_name, part in table.groupby("pass", sort=False):
        out += [f"#### pass `{pass_name}`", "", header_line(part), "",
                "| comparison | kind | starts | seeds | tasks | metric | Δ | task-only 95 % | seed-t 95 % | "
                "seed-boot 95 % | k/n | p | p_holm | IQM A / B | PoI | verdict |", "|---" * 16 + "|"]
        for _, r in part.iterrows():
            for m in METRICS:
                stats = (f"{_num(r[f'{m}_diff'])} | {_iv(r[f'{m}_task_lo'], r[f'{m}_task_hi'])} | "
                         f"{_iv(r[f'{m}_seed_t_lo'], r[f'{m}_seed_t_hi'])} | "
                         f"{_iv(r[f'{m}_seed_boot_lo'], r[f'{m}_seed_boot_hi'])} | "
                         f"{_num(r[f'{m}_k_improved'], '.0f')}/{r['n']} | {_num(r[f'{m}_p'], '.3g')} | "
                         f"{_num(r[f'{m}_p_holm'], '.3g')} | {_num(r[f'{m}_iqm_a'], '.3f')} / "
                         f"{_num(r[f'{m}_iqm_b'], '.3f')} | {_num(r[f'{m}_poi'], '.2f')}")
                verdict_text = str(r[f"{m}_verdict"]).replace("|", "\\|")  # "|Δ|" inside a table cell
                out.append(f"| {r['comparison']} | {r['kind']} | {r['starts']} | {r['seeds']} | "
                           f"{_num(r['tasks'], '.0f')} | {m} | {stats} | {verdict_text} |")
        out.append("")
    return "\n".join(out).rstrip()
