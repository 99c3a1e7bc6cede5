"""`Tau2Benchmark`: τ²-bench airline / retail / telecom against any `BenchPolicy`, scored by τ²'s evaluator.

For each domain, the first `limit` tasks of the split (default `test`: 20 / 40 / 40) are each run k times
(runner.py). Per domain: Avg@k (category accuracy) and pass^1..k (in `groups` as `<domain>/pass^j`);
`overall` = the mean of the domains' Avg@k (the EnvACE paper's "τ² Avg", most likely; unverified).

The user simulator is any BenchPolicy (`user_sim`); the official one is gpt-4.1 (NVIDIA's config:
qwen-235b). With no `user_sim`, the policy under test also plays the user. Every result lists its
departures; with a small local model as the user simulator the score says little (the user must follow
a hidden scenario over many turns), and the result says so.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from envace.benchmarks import progress
from envace.benchmarks.base import BenchmarkResult, CategoryScore
from envace.benchmarks.tau2.data import DEV_DOMAINS, DOMAINS, load_task_file, load_tasks, load_tau2
from envace.benchmarks.tau2.runner import run_task
from envace.benchmarks.tau2.scoring import avg_at_k, is_success, pass_hat_ks
from envace.engines.reply import BenchPolicy

OVERALL_DEFINITION = "mean over the selected τ² domains of Avg@k (mean reward over tasks x k samples)"
OFFICIAL_USER = "gpt-4.1"
LOCAL_HINTS = ("local", "tiny", "smollm", "127.0.0.1", "localhost")  # names of small local user simulators
STRONG_USER_HINT = ("a real LLM user simulator (e.g. Qwen3-235B or gpt-4.1 behind vLLM / an API, passed as "
                    "user_sim) is needed for a meaningful τ² score")


class Tau2Benchmark:
    name = "tau2"

    def __init__(self, domains: Sequence[str] | None = None, split: str | None = "test",
                 user_sim: BenchPolicy | None = None,
                 checkout: str | Path | None = None, max_steps: int = 200, max_errors: int = 10,
                 out_dir: str | Path | None = None, local_user_note: bool | None = None,
                 tasks_path: str | Path | None = None) -> None:
        self.domains = list(domains) if domains is not None else list(DOMAINS)
        for d in self.domains:
            if d not in DOMAINS + DEV_DOMAINS:
                raise ValueError(f"τ² domain {d!r} is not one of {list(DOMAINS + DEV_DOMAINS)} "
                                 "(bench.tau2_domains=[...])")
        if tasks_path is not None and len(self.domains) != 1:
            raise ValueError(f"tasks_path {tasks_path} holds the tasks of one domain; pass "
                             f"bench.tau2_domains=[that domain] (got {self.domains})")
        self.tasks_path = Path(tasks_path) if tasks_path is not None else None
        if max_steps < 1 or max_errors < 1:
            raise ValueError(f"max_steps {max_steps} and max_errors {max_errors} must be >= 1")
        self.split, self.user_sim, self.checkout = split, user_sim, checkout
        self.max_steps, self.max_errors = max_steps, max_errors
        self.out_dir = Path(out_dir) if out_dir is not None else None
        self.local_user_note = local_user_note

    def run(self, policy: BenchPolicy, *, limit: int | None = None, k: int = 1, seed: int = 0) -> BenchmarkResult:
        if k < 1:
            raise ValueError(f"k {k} must be >= 1")
        t2 = load_tau2(self.checkout)
        # never a test-time-rehearsal wrapper (its `inner` is the plain policy): its memory must not reach the user
        user = self.user_sim if self.user_sim is not None else getattr(policy, "inner", policy)
        records: list[dict[str, Any]] = []
        nl_judged: list[str] = []  # tasks whose reward needs τ²'s NL-assertion LLM judge
        cats: dict[str, CategoryScore] = {}
        groups: dict[str, float | None] = {}
        for domain in self.domains:
            tasks = (load_task_file(t2, self.tasks_path) if self.tasks_path is not None
                     else load_tasks(t2, domain, self.split))[: limit if limit is not None else None]
            by_task: dict[str, list[float]] = {}
            nl_judged += [f"{domain}/{t.id}" for t in tasks if _nl_judged(t)]
            progress.active().add_total(k * len(tasks))
            for sample in range(k):
                for task in tasks:
                    run = run_task(t2, domain, task, policy, user, sample=sample, seed=seed,
                                   max_steps=self.max_steps, max_errors=self.max_errors)
                    records.append(run.record())
                    by_task.setdefault(str(task.id), []).append(run.reward)
                    progress.active().advance(error=run.error is not None)
            avg = avg_at_k(by_task)
            correct = sum(is_success(r) for rs in by_task.values() for r in rs)
            cats[domain] = CategoryScore(domain, avg, correct, k * len(tasks), len(tasks))
            groups[f"{domain}/avg@{k}"] = avg
            for j, v in pass_hat_ks(by_task).items():
                groups[f"{domain}/pass^{j}"] = v
        avgs = [c.accuracy for c in cats.values() if c.accuracy is not None]
        overall = sum(avgs) / len(avgs) if avgs else None
        groups["avg"] = overall
        models = {"policy": getattr(policy, "name", type(policy).__name__),
                  "user_simulator": getattr(user, "name", type(user).__name__), "judge": None}
        result = BenchmarkResult(
            benchmark="tau2", categories=cats, groups=groups, overall=overall, overall_definition=OVERALL_DEFINITION,
            departures=self._departures(t2.version, models, limit, k, nl_judged), models=models, k=k, limit=limit,
            seed=seed,
            records=records, meta={"tau2_version": t2.version, "tau2_source": t2.source, "split": self.split,
                                   "max_steps": self.max_steps, "max_errors": self.max_errors,
                                   "terminations": _count(r["termination"] for r in records)})
        result.note_task_errors()
        if self.out_dir is not None:
            result.save(self.out_dir / f"tau2_{uuid.uuid4().hex[:8]}.json")
        return result

    def _departures(self, version: str, models: dict[str, Any], limit: int | None, k: int,
                    nl_judged: list[str] = ()) -> list[str]:  # type: ignore[assignment]
        out = [f"τ²-bench code and data from {version} (NVIDIA's repackaging: an older snapshot without the "
               "upstream task fixes; no explicit reward_basis, so τ²'s default [DB, COMMUNICATE] applies to "
               "airline / retail)" if version.startswith("nvidia") else f"τ²-bench from {version}",
               "agent and user simulator queried through envace BenchPolicy (OpenAI chat messages + tools) "
               "instead of litellm; prompts, orchestration and evaluation are τ²'s own",
               f"user simulator: {models['user_simulator']} (official: {OFFICIAL_USER})"]
        if models["user_simulator"] == models["policy"]:
            out.append("the policy under test also plays the user simulator")
        local = self.local_user_note if self.local_user_note is not None else \
            any(s in str(models["user_simulator"]).lower() for s in LOCAL_HINTS)
        if local:
            out.append(f"the user simulator is a small local model: {STRONG_USER_HINT}")
        if self.tasks_path is not None:
            out.append(f"tasks read from {self.tasks_path} (not a τ² split)")
        else:
            out.append(f"split {self.split!r}" + (" (the paper's split is unknown)" if self.split else ""))
        dev = [d for d in self.domains if d in DEV_DOMAINS]
        if dev:
            out.append(f"development domain(s) {dev}: not part of τ²-Bench's score")
        if limit is not None:
            out.append(f"only the first {limit} tasks of each domain")
        if k != 4:
            out.append(f"Avg@{k} (the paper reports Avg@4)")
        if self.max_steps != 200:
            out.append(f"max_steps {self.max_steps} (τ² default 200)")
        if nl_judged:
            out.append(f"{len(nl_judged)} task(s) ({', '.join(nl_judged[:5])}{', ...' if len(nl_judged) > 5 else ''}) "
                       "have NL assertions in their reward basis: τ²'s evaluator asks its own LLM judge (litellm, "
                       "tau2.config.DEFAULT_LLM_NL_ASSERTIONS) for them, which envace does not route; without "
                       "that model's credentials they are evaluator errors scoring 0")
        return out


def _count(items: Any) -> dict[str, int]:
    out: dict[str, int] = {}
    for x in items:
        out[x] = out.get(x, 0) + 1
    return out


def _nl_judged(task: Any) -> bool:
    """τ²'s evaluator sends this task's NL assertions to its LLM judge (reward basis NL_ASSERTION, assertions set)."""
    criteria = getattr(task, "evaluation_criteria", None)
    basis = [str(getattr(b, "value", b)) for b in (getattr(criteria, "reward_basis", None) or [])]
    return "NL_ASSERTION" in basis and bool(getattr(criteria, "nl_assertions", None))
