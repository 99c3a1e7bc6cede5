"""`envace tts diagnose`: why test-time rehearsal (TTS) helps or hurts a checkpoint on the tool world.

One table, one row per condition, every row run on the same tasks with the same sampling seeds as N = 0,
its committed episode sampled with N = 0's seeds (common random numbers, envace.tts.rollout), and compared
with N = 0 task by task (paired bootstrap over tasks, the checkpoint held fixed: envace.evaluation.tts_measures):
- `N=0` and `N=n mode` for each configured n and mode: the method as `envace eval --tts-n` runs it, with
  the memory strategy `tts.memory` (every row but the placebos uses it);
- `oracle`: the reference condition (bound_n, bound_mode) with the private episodes played against private
  copies of the real world (each a fresh environment reset with the real task behind the private view), so
  the memory is written from the world's true responses; nothing runs in the committed run's environments,
  which are made only after the private phase, by their own factory. An upper bound on what better
  rehearsal could give, not a method: it reads the real world.
- `placebo: empty`, `placebo: other`: the reference condition's committed prompt with the memory replaced by
  an empty note under the same header, or by another task's memory cut to the same length: what the prompt
  change alone does. The note is fixed for the whole episode (with tts.rehearse_at=every the method renews it).
  Not with `tts.memory=best_of_n`, which writes no note (set placebo=false).
- contrasts, paired the same way: the reference condition minus each placebo (what the rehearsed memory adds
  over the prompt change alone) and the oracle minus the reference condition (what true responses add).
Each row also has the committed run's first-prompt length and context-guard share, first-action agreement
with N = 0 and with the oracle, and whether the memory names the gold calls' tools and argument values.
Departure: the paper reports TTS means only; these bounds and intervals are the project's own diagnosis.
"""

from __future__ import annotations

import csv
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import Field, model_validator

from envace.config import BaseConfig, RolloutConfig
from envace.data.config import DataConfig
from envace.evaluation.config import _eval_rollout
from envace.evaluation.paired import TaskScores
from envace.evaluation.tts_measures import (
    agreement,
    first_action,
    memory_quality,
    paired_vs_base,
    placebo_memories,
    prompt_stats,
    reading,
)
from envace.evaluation.world import score_episodes
from envace.rollout import run_rollout
from envace.tts.config import MAX_N, TTSConfig, TTSMode
from envace.tts.prompts import MEMORY_HEADER, with_system_note
from envace.tts.rollout import tts_rollout
from envace.tts.strategies import writes_note
from envace.types import Environment, Mode, Task, ToolCall, Trajectory

BASE = "N=0"


class TTSDiagnosisConfig(BaseConfig):
    """`envace tts diagnose MODEL_DIR key=value ...`."""

    model: str = Field(..., description="Policy model dir or step_* checkpoint dir.")
    n_tasks: int = Field(20, ge=1, description="Tool-world tasks (the demo's TTS sweep uses the first 20 test tasks).")
    split: str = Field("test", description="Tool-world split.")
    data: DataConfig = Field(default_factory=lambda: DataConfig(split="test"), description="Task source.")
    seeds: list[int] = Field(default_factory=lambda: [0], description="Sampling seeds; each is one pass over the "
                             "tasks (the paired unit stays the task: its seeds are averaged).")
    n: list[int] = Field(default_factory=lambda: [1, 2], description="Private rehearsal counts besides N=0.")
    modes: list[TTSMode] = Field(default_factory=lambda: list(TTSMode), description="TTS modes run for each n.")
    bound_n: int | None = Field(None, description="N of the oracle and placebo rows (None: the largest of n).")
    bound_mode: TTSMode = Field(TTSMode.PARALLEL, description="Mode of the oracle and placebo rows.")
    oracle: bool = Field(True, description="Run the oracle bound (private phase against private world copies).")
    placebo: bool = Field(True, description="Run the two placebo bounds (empty note, another task's note).")
    rollout: RolloutConfig = Field(default_factory=_eval_rollout, description="Sampling and limits, as `envace eval`.")
    tts: TTSConfig = Field(default_factory=TTSConfig, description="Test-time rehearsal settings, as `envace eval` "
                           "(tts.memory, temperatures, caps); N and the mode of each row come from n, modes, bound_*.")
    n_boot: int = Field(10_000, ge=100, description="Bootstrap resamples per interval.")
    out_dir: str | None = Field(None, description="Where the JSON and CSV go (None: tts_diagnosis_<model> beside "
                                "the model).")

    @model_validator(mode="after")
    def _check(self) -> TTSDiagnosisConfig:
        bad = [v for v in self.n if not 1 <= v <= MAX_N]
        if bad or not self.n:
            raise ValueError(f"n={self.n}: list private rehearsal counts in 1..{MAX_N} (N=0 is always run), "
                             "e.g. n=[1,2]")
        if not self.modes or not self.seeds:
            raise ValueError("modes and seeds must each name at least one value, e.g. modes=[parallel] seeds=[0]")
        fixed = sorted({"n", "mode"} & self.tts.model_fields_set)
        if fixed:
            raise ValueError(f"tts.{fixed[0]} is set, but the diagnosis runs a grid: list the counts in n=[...] and "
                             "the modes in modes=[...] (bound_n / bound_mode pick the bounds' row)")
        if self.placebo and not writes_note(self.tts.memory):
            raise ValueError(f"placebo rows replace the memory note, and tts.memory={self.tts.memory} writes none; "
                             "set placebo=false")
        if (self.oracle or self.placebo) and (self.bound() not in self.n or self.bound_mode not in self.modes):
            raise ValueError(f"bound_n={self.bound()} bound_mode={self.bound_mode} is not one of the TTS rows "
                             f"(n={self.n}, modes={self.modes}); the oracle and placebo rows compare with it")
        return self

    def bound(self) -> int:
        return self.bound_n if self.bound_n is not None else max(self.n)


@dataclass(frozen=True)
class Condition:
    name: str
    kind: str  # base | tts | oracle | placebo
    n: int = 0
    mode: str = TTSMode.PARALLEL.value
    placebo: str | None = None


def conditions(cfg: TTSDiagnosisConfig) -> list[Condition]:
    out = [Condition(BASE, "base")]
    out += [Condition(f"N={n} {m.value}", "tts", n, m.value) for n in sorted(set(cfg.n)) for m in cfg.modes]
    b, bm = cfg.bound(), cfg.bound_mode
    if cfg.oracle:
        out.append(Condition(f"oracle N={b} {bm.value}", "oracle", b, bm.value))
    if cfg.placebo:
        out += [Condition(f"placebo: {k} note", "placebo", b, bm.value, k) for k in ("empty", "other")]
    return out


class PrivateWorldCopy:
    """A fresh real environment for ONE private episode: reset with the real task behind the private view
    (matched by uuid; the view lacks the initial state). Never an environment of the committed run."""

    def __init__(self, env: Environment, by_uuid: dict[str, Task]) -> None:
        self.env, self.by_uuid = env, by_uuid

    def reset(self, task: Task) -> None:
        if task.uuid not in self.by_uuid:
            raise ValueError(f"oracle world copy: task {task.uuid!r} is not one of the diagnosed tasks")
        self.env.reset(self.by_uuid[task.uuid])

    def execute(self, call: ToolCall) -> Any:
        return self.env.execute(call)

    def final_reward(self, trajectory: Trajectory) -> float:
        return self.env.final_reward(trajectory)


def private_world(tasks: list[Task], make: Callable[[], Environment]) -> Callable[[], Environment]:
    """Factory of `PrivateWorldCopy`s over `make()` (a new environment per call)."""
    by_uuid = {t.uuid: t for t in tasks}
    if len(by_uuid) != len(tasks):
        raise ValueError("oracle world copies need distinct task uuids; the diagnosed tasks repeat one")
    return lambda: PrivateWorldCopy(make(), by_uuid)


def with_note(task: Task, memory: str) -> Task:
    """The task with the memory header and `memory` (possibly empty) in its system prompt, laid out as
    `memory_note` lays out a (stripped) memory, without stripping, so a placebo keeps its exact length."""
    return replace(task, messages=with_system_note(task.messages, f"{MEMORY_HEADER}\n{memory}"))


def run_condition(cond: Condition, tasks: list[Task], engine: Any, cfg: TTSDiagnosisConfig,
                  env_factory: Callable[[], Environment], seed: int,
                  bound_memories: list[str] | None = None,
                  copy_factory: Callable[[], Environment] | None = None) -> list[Trajectory]:
    """The committed episodes of one condition at one seed, ordered by task (k = 1). `copy_factory` makes
    the oracle's private world copies (default: `env_factory`, whose every call is a fresh environment)."""
    opts = TTSConfig.model_validate({**cfg.tts.model_dump(), "n": cond.n, "mode": cond.mode})
    rc = cfg.rollout
    if cond.kind in ("base", "tts", "oracle"):
        world = private_world(tasks, copy_factory or env_factory) if cond.kind == "oracle" else None
        return tts_rollout(tasks, engine, rc, opts, env_factory, seed, k=1, private_world=world)
    if bound_memories is None:
        raise RuntimeError(f"{cond.name} needs the memories of N={cond.n} {cond.mode}, which did not run")
    notes = placebo_memories(bound_memories, cond.placebo or "")
    commit_cfg = rc if opts.commit_temperature is None else rc.model_copy(
        update={"act": rc.act.model_copy(update={"temperature": opts.commit_temperature})})
    # the committed run of tts_rollout's attempt 0, with the placebo note in place of m_x
    trajs = run_rollout([with_note(t, m) for t, m in zip(tasks, notes)], k=1, policy=engine, cfg=commit_cfg,
                        mode=Mode.ENV, env_factory=env_factory, seed=seed, rehearse_style=rc.rehearse_style,
                        first_sample=0)
    for t, m in zip(trajs, notes):
        t.tts = {"n": 0, "mode": cond.mode, "memory": m, "placebo": cond.placebo, "phases": [], "private": []}
    return trajs


def diagnose(cfg: TTSDiagnosisConfig, engine: Any, tasks: list[Task], env_factory: Callable[[], Environment],
             echo: Callable[[str], None] = lambda _s: None,
             copy_factory: Callable[[], Environment] | None = None) -> dict[str, Any]:
    """Every condition on every seed; rows with paired intervals vs N = 0 and the measures (module docstring).
    A condition that raises becomes a row with its `error`; the others still run. `copy_factory`: as in
    `run_condition`."""
    conds = conditions(cfg)
    runs: dict[str, list[list[Trajectory]]] = {}  # name -> [seed][task]
    rows: list[dict[str, Any]] = []
    bound_name = f"N={cfg.bound()} {cfg.bound_mode.value}"
    for cond in conds:
        t0 = time.perf_counter()
        row: dict[str, Any] = {"name": cond.name, "kind": cond.kind, "n": cond.n, "mode": cond.mode}
        try:
            per_seed = []
            for si, seed in enumerate(cfg.seeds):
                mem = [t.tts["memory"] if t.tts else "" for t in runs[bound_name][si]] if bound_name in runs else None
                trajs = run_condition(cond, tasks, engine, cfg, env_factory, seed, mem, copy_factory)
                score_episodes(trajs)
                per_seed.append(sorted(trajs, key=lambda t: t.prompt_index))
            runs[cond.name] = per_seed
        except Exception as exc:  # noqa: BLE001 - one failed component is reported, the rest still run
            row["error"] = f"{type(exc).__name__}: {exc}".splitlines()[0]
            echo(f"error: {cond.name} failed ({row['error']})")
        row["wall_s"] = round(time.perf_counter() - t0, 1)
        if "error" not in row:
            echo(f"tts diagnose: {cond.name} done in {row['wall_s']:.0f} s")
        rows.append(row)
    scores = {name: _scores(per_seed, tasks, cfg) for name, per_seed in runs.items()}
    oracle_name = next((c.name for c in conds if c.kind == "oracle"), None)
    for row in rows:
        if "error" in row:
            continue
        per_seed = runs[row["name"]]
        flat = [t for trajs in per_seed for t in trajs]
        row["success"] = float(scores[row["name"]].success.mean())
        row["reward"] = float(scores[row["name"]].reward.mean())
        if BASE in scores:
            row["paired"] = paired_vs_base(scores[BASE], scores[row["name"]], n_boot=cfg.n_boot)
        row.update(prompt_stats(flat))
        acts = [first_action(t) for t in flat]
        for other, key in ((BASE, "agree_n0"), (oracle_name, "agree_oracle")):
            if other in runs:
                row[key] = agreement(acts, [first_action(t) for trajs in runs[other] for t in trajs])
        memories = [(t.tts or {}).get("memory", "") for t in flat]
        if any(memories):
            qual = [q for t, m in zip(flat, memories) if (q := memory_quality(m, t)) is not None]
            row["memory_chars"] = float(np.median([len(m) for m in memories]))
            row["memory_tools"] = float(np.mean([q[0] for q in qual])) if qual else None
            row["memory_args"] = float(np.mean([q[1] for q in qual])) if qual else None
    # what the rehearsed memory adds over the prompt change alone, and what true responses add over rehearsal
    pairs = [(f"placebo: {k} note", bound_name) for k in ("empty", "other")] + [(bound_name, oracle_name)]
    contrasts = {f"{b} - {a}": paired_vs_base(scores[a], scores[b], n_boot=cfg.n_boot)
                 for a, b in pairs if a in scores and b in scores}
    read = {m: reading(rows, m, contrasts) for m in ("success", "reward")}
    return {"tasks": [t.uuid for t in tasks], "seeds": list(cfg.seeds), "unit": "tasks (checkpoint fixed)",
            "rows": rows, "contrasts": contrasts, "reading": read,
            "per_task": {name: s.to_json() for name, s in scores.items()},
            "memories": {name: [[(t.tts or {}).get("memory", "") for t in trajs] for trajs in per_seed]
                         for name, per_seed in runs.items()}}


def _scores(per_seed: list[list[Trajectory]], tasks: list[Task], cfg: TTSDiagnosisConfig) -> TaskScores:
    succ = [[float(trajs[p].reward_breakdown.get("success") or 0.0) for trajs in per_seed] for p in range(len(tasks))]
    rew = [[float(trajs[p].reward or 0.0) for trajs in per_seed] for p in range(len(tasks))]
    return TaskScores([t.uuid for t in tasks], list(cfg.seeds), 1, cfg.rollout.act.temperature, np.array(succ),
                      np.array(rew))


def _cell(row: dict[str, Any], m: str) -> str:
    if m not in row:
        return "-"
    p = row.get("paired", {}).get(m)
    if p is None or row["kind"] == "base":
        return f"{row[m]:.3f}"
    return f"{row[m]:.3f} {p['diff']:+.3f} [{p['lo']:+.3f},{p['hi']:+.3f}]"


def _num(v: Any, fmt: str) -> str:
    return "-" if v is None else format(v, fmt)


COLUMNS = ("condition", "success (diff vs N=0 [95% CI])", "reward (diff vs N=0 [95% CI])", "prompt med/p95",
           "cut", "agree N=0", "agree oracle", "mem tools", "mem args")


def format_table(result: dict[str, Any]) -> str:
    """The printed table: one line per condition, then the unit and the reading."""
    lines = [" | ".join(COLUMNS)]
    for r in result["rows"]:
        if "error" in r:
            lines.append(f"{r['name']} | error: {r['error']}")
            continue
        lines.append(" | ".join([
            r["name"], _cell(r, "success"), _cell(r, "reward"),
            f"{r['prompt_median']:.0f}/{r['prompt_p95']:.0f}", f"{r['context_cut']:.2f}",
            _num(r.get("agree_n0"), ".2f"), _num(r.get("agree_oracle"), ".2f"),
            _num(r.get("memory_tools"), ".2f"), _num(r.get("memory_args"), ".2f")]))
    n = len(result["tasks"])
    lines.append(f"Paired per task vs N=0 on the same {n} tasks and seeds {result['seeds']} "
                 f"(unit: {result['unit']}; 95 % paired bootstrap over tasks).")
    for name, c in result.get("contrasts", {}).items():
        lines.append(f"Contrast {name}: " + "; ".join(
            f"{m} {c[m]['diff']:+.3f} [{c[m]['lo']:+.3f}, {c[m]['hi']:+.3f}]" for m in ("success", "reward")))
    lines += [f"Reading ({m}): {text}" for m, text in result["reading"].items()]
    return "\n".join(lines)


def write_outputs(result: dict[str, Any], out: Path) -> dict[str, Path]:
    out.mkdir(parents=True, exist_ok=True)
    paths = {"json": out / "tts_diagnosis.json", "csv": out / "tts_diagnosis.csv"}
    paths["json"].write_text(json.dumps(result, indent=2, default=str))
    keys = ("name", "kind", "n", "mode", "success", "reward", "prompt_median", "prompt_p95", "context_cut",
            "agree_n0", "agree_oracle", "memory_chars", "memory_tools", "memory_args", "wall_s", "error")
    with paths["csv"].open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow([*keys, *(f"{m}_{x}" for m in ("success", "reward") for x in ("diff", "lo", "hi"))])
        for r in result["rows"]:
            p = r.get("paired", {})
            w.writerow([r.get(k, "") for k in keys] + [p.get(m, {}).get(x, "") for m in ("success", "reward")
                                                       for x in ("diff", "lo", "hi")])
    return paths


def run_tts_diagnosis(cfg: TTSDiagnosisConfig, echo: Callable[[str], None] = print) -> dict[str, Any]:
    """Load the checkpoint and the tasks, diagnose, write the JSON and CSV; returns the result with
    `paths` and `failed` (the names of conditions that raised)."""
    from envace.cpu_threads import apply_thread_policy
    from envace.data.tasks import load_tasks
    from envace.evaluation.paired import engine_for
    from envace.evaluation.run import resolve_model_dir
    from envace.models.model_dir import check_model_dir
    from envace.worlds.environment import WorldEnvironment

    apply_thread_policy(None)
    model_dir = check_model_dir(resolve_model_dir(cfg.model))
    out = Path(cfg.out_dir) if cfg.out_dir else model_dir.parent / f"tts_diagnosis_{model_dir.name}"
    tasks = load_tasks(cfg.data, split=cfg.split, n=cfg.n_tasks)
    echo(f"tts diagnose: {model_dir} on {len(tasks)} {cfg.split} tasks, seeds {cfg.seeds}; results go to {out}")
    t0 = time.perf_counter()
    result = diagnose(cfg, engine_for(model_dir), tasks, WorldEnvironment, echo=echo)
    result.update(model=str(model_dir), config=cfg.model_dump(mode="json"),
                  wall_s=round(time.perf_counter() - t0, 1))
    result["failed"] = [r["name"] for r in result["rows"] if "error" in r]
    result["paths"] = {k: str(v) for k, v in write_outputs(result, out).items()}
    return result
