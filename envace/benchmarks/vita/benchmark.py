"""`VitaBenchmark`: VitaBench from a user's checkout against any `BenchPolicy`, judged by the sliding-window
rubric judge over any judge backend.

Per set (delivery, instore, ota, cross_domain): the first `limit` tasks, k samples each (runner.py);
category accuracy = Avg@k; `groups` also holds `<set>/pass^j`; `overall` = the mean of the sets' Avg@k
(which sets the paper's "VitaBench Avg" averages is unknown). Official: English or Chinese tasks
(default Chinese), user simulator and agent gpt-4.1, judge claude-3.7-sonnet; every result lists where
this run departs from that.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from envace.benchmarks import progress
from envace.benchmarks.base import BenchmarkResult, CategoryScore
from envace.benchmarks.errors import TaskError, TaskStage, failed_record
from envace.benchmarks.tau2.scoring import avg_at_k, is_success, pass_hat_ks
from envace.benchmarks.vita.checkout import VitaCheckout
from envace.benchmarks.vita.data import SETS, BadTask, VitaDataError, language_name, load_task_entries, tasks_file
from envace.benchmarks.vita.runner import run_task
from envace.benchmarks.vita.scoring import RubricJudge
from envace.engines.reply import BenchPolicy

OVERALL_DEFINITION = "mean over the selected VitaBench sets of Avg@k (reward 1 only if every rubric holds)"
OFFICIAL = {"user_simulator": "gpt-4.1", "judge": "anthropic.claude-3.7-sonnet"}


class VitaBenchmark:
    name = "vita"

    def __init__(self, checkout: str | Path, judge: Any, sets: Sequence[str] | None = None, language: str = "en",
                 user_sim: BenchPolicy | None = None, max_steps: int = 300, max_errors: int = 10,
                 out_dir: str | Path | None = None) -> None:
        self.checkout = VitaCheckout(Path(checkout), language_name(language))
        self.sets = list(sets) if sets is not None else list(SETS)
        for s in self.sets:
            if s not in SETS:
                raise ValueError(f"VitaBench set {s!r} is not one of {list(SETS)}")
        if judge is None:
            raise ValueError("VitaBench needs a judge: an OpenAIChatClient (complete) or a BenchPolicy; the official "
                             "judge is claude-3.7-sonnet, offline use a local model behind `envace serve` / vLLM")
        template = self.checkout.prompt("sliding_window_eval_template")
        self.judge = RubricJudge(judge, template=template, language=self.checkout.language)
        self.user_sim, self.max_steps, self.max_errors = user_sim, max_steps, max_errors
        self.out_dir = Path(out_dir) if out_dir is not None else None

    def run(self, policy: BenchPolicy, *, limit: int | None = None, k: int = 1, seed: int = 0) -> BenchmarkResult:
        if k < 1:
            raise ValueError(f"k {k} must be >= 1")
        missing = [str(f) for f in (tasks_file(self.checkout.root, s, self.checkout.language) for s in self.sets)
                   if not f.is_file()]
        if missing:  # checked before any task runs: a missing set must not end the run halfway
            raise VitaDataError(f"VitaBench task file(s) not found: {', '.join(missing)}; pass the root of a complete "
                                "clone (its data/ holds every set), or choose the sets you have with "
                                "bench.vita_sets=[...] (e.g. bench.vita_sets=[delivery])")
        user = self.user_sim if self.user_sim is not None else policy
        records: list[dict[str, Any]] = []
        cats: dict[str, CategoryScore] = {}
        groups: dict[str, float | None] = {}
        for s in self.sets:
            tasks = load_task_entries(self.checkout.root, s, self.checkout.language)[: limit if limit is not None
                                                                                         else None]
            by_task: dict[str, list[float]] = {}
            progress.active().add_total(k * len(tasks))
            for sample in range(k):
                for task in tasks:
                    if isinstance(task, BadTask):  # unreadable: an error of that task, the others still run
                        records.append(failed_record(task.id, s, sample, seed,
                                                     TaskError.of(TaskStage.ADAPTER, task.error)))
                        by_task.setdefault(task.id, []).append(0.0)
                        progress.active().advance(error=True)
                        continue
                    run = run_task(self.checkout, task, policy, user, self.judge, sample=sample, seed=seed,
                                   max_steps=self.max_steps, max_errors=self.max_errors)
                    records.append(run.record())
                    by_task.setdefault(task.id, []).append(run.reward)
                    progress.active().advance(error=run.error is not None)
            correct = sum(is_success(r) for rs in by_task.values() for r in rs)
            cats[s] = CategoryScore(s, avg_at_k(by_task), correct, k * len(tasks), len(tasks))
            groups[f"{s}/avg@{k}"] = cats[s].accuracy
            groups.update({f"{s}/pass^{j}": v for j, v in pass_hat_ks(by_task).items()})
        avgs = [c.accuracy for c in cats.values() if c.accuracy is not None]
        overall = sum(avgs) / len(avgs) if avgs else None
        groups["avg"] = overall
        models = {"policy": getattr(policy, "name", type(policy).__name__),
                  "user_simulator": getattr(user, "name", type(user).__name__), "judge": str(self.judge.name)}
        result = BenchmarkResult(
            benchmark="vita", categories=cats, groups=groups, overall=overall, overall_definition=OVERALL_DEFINITION,
            departures=self._departures(models, limit, k), models=models, k=k, limit=limit, seed=seed,
            records=records, meta={"checkout": str(self.checkout.root), "language": self.checkout.language,
                                   "official_judge_prompt": self.judge.official_template,
                                   "window_size": self.judge.window_size, "overlap": self.judge.overlap,
                                   "terminations": _count(r.get("termination") for r in records)})
        result.note_task_errors()
        if self.out_dir is not None:
            result.save(self.out_dir / f"vita_{uuid.uuid4().hex[:8]}.json")
        return result

    def _departures(self, models: dict[str, Any], limit: int | None, k: int) -> list[str]:
        out = ["agent / user loop re-implemented after VitaBench's Orchestrator (VitaBench's own calls its HTTP "
               "client); environments, tools and prompts come from the checkout",
               f"judge: {models['judge']} (official: {OFFICIAL['judge']}); judge variance moves Avg@4 by points",
               f"user simulator: {models['user_simulator']} (official: {OFFICIAL['user_simulator']})",
               f"language {self.checkout.language} (VitaBench's default is chinese; the paper's is unknown)"]
        if models["user_simulator"] == models["policy"]:
            out.append("the policy under test also plays the user simulator")
        if not self.judge.official_template:
            out.append("judge system prompt paraphrased (the checkout has no sliding_window_eval_template.yaml)")
        if self.sets != list(SETS):
            out.append(f"sets {self.sets} only (all four: {list(SETS)})")
        if limit is not None:
            out.append(f"only the first {limit} tasks of each set")
        if k != 4:
            out.append(f"Avg@{k} (the paper reports Avg@4)")
        return out


def _count(items: Any) -> dict[str, int]:
    out: dict[str, int] = {}
    for x in items:
        out[str(x)] = out.get(str(x), 0) + 1
    return out
