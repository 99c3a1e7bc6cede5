"""`FinMCPBenchmark`: FinMCP-Bench (arXiv 2603.24943) against any `BenchPolicy`, reported apart from the
paper's Overall (the EnvACE paper gives TF1 46.78 and tool precision 54.04 for EnvACE-8B).

For each of the first `limit` records and each of k samples: the teacher-forced loop with the replay
tool server (runner.py), then the name-multiset metrics (scoring.py) over all (record, sample) pairs.
`groups` holds TP / TR / TF1 (tool precision / recall / F1) macro and micro plus EMR, the form
report.py prints; `overall` = macro TF1 (whether the paper's TF1 is macro or micro is unknown: both are
reported). Categories: one per L1 scenario, accuracy = that scenario's macro TF1. A sample that raised
(a policy transport failure, our loop) is recorded with its `task_error` (errors.py) and scored as a
failure: no predicted tool, so TP 0 / FP 0 / FN = its gold calls and no exact match. Departure: the
official evaluation drops samples flagged `error`, which would let errors raise the score.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from envace.benchmarks import progress
from envace.benchmarks.base import BenchmarkResult, CategoryScore
from envace.benchmarks.errors import StagedPolicy, StageTracker, failed_record
from envace.benchmarks.finmcp.data import FinMCPRecord, load_records, load_tool_schemas, synthesise_schemas
from envace.benchmarks.finmcp.runner import teacher_forced
from envace.benchmarks.finmcp.scoring import SampleCounts, aggregate, breakdown, tool_names
from envace.engines.reply import BenchPolicy

OVERALL_DEFINITION = "macro tool F1 (mean over samples of the tool-name multiset F1); micro and EMR in groups"


class FinMCPBenchmark:
    name = "finmcp"

    def __init__(self, data_path: str | Path, tools_path: str | Path | None = None, max_tool_num: int = 20,
                 out_dir: str | Path | None = None) -> None:
        self.data_path, self.tools_path = Path(data_path), Path(tools_path) if tools_path else None
        self.max_tool_num = max_tool_num
        self.out_dir = Path(out_dir) if out_dir is not None else None

    def run(self, policy: BenchPolicy, *, limit: int | None = None, k: int = 1, seed: int = 0) -> BenchmarkResult:
        if k < 1:
            raise ValueError(f"k {k} must be >= 1")
        records = load_records(self.data_path)[: limit if limit is not None else None]
        tools = load_tool_schemas(self.tools_path) if self.tools_path else synthesise_schemas(records)
        out: list[dict[str, Any]] = []
        counts: list[SampleCounts] = []
        kept: list[FinMCPRecord] = []
        replay = {"exact": 0, "name": 0, "miss": 0}
        progress.active().add_total(k * len(records))
        for sample in range(k):
            for rec in records:
                out.append(self._one(policy, rec, tools, sample, seed, counts, kept, replay))
                progress.active().advance(error=out[-1]["task_error"] is not None)
        overall_metrics = aggregate(counts)
        by_l1 = breakdown(counts, [r.level1 for r in kept])
        exact = {name: sum(c.exact for c, r in zip(counts, kept) if r.level1 == name) for name in by_l1}
        cats = {name: CategoryScore(name, m["TF1_macro"], exact[name],
                                    int(m["N"]), int(m["N"]) // k, note="accuracy = macro tool F1")
                for name, m in by_l1.items()}
        groups: dict[str, float | None] = {key: v for key, v in overall_metrics.items() if key != "N"}
        errors = sum(r["task_error"] is not None for r in out)
        result = BenchmarkResult(
            benchmark="finmcp", categories=cats, groups=groups, overall=overall_metrics.get("TF1_macro"),
            overall_definition=OVERALL_DEFINITION,
            departures=self._departures(limit, k, errors, replay),
            models={"policy": getattr(policy, "name", type(policy).__name__), "user_simulator": None, "judge": None},
            k=k, limit=limit, seed=seed, records=out,
            meta={"data_path": str(self.data_path), "tools": str(self.tools_path) if self.tools_path else "synthesised",
                  "replay": replay, "by_level1": by_l1, "by_difficulty": breakdown(counts, [r.level for r in kept]),
                  "by_task": breakdown(counts, [r.task for r in kept]), "errors": errors})
        result.note_task_errors()
        if self.out_dir is not None:
            result.save(self.out_dir / f"finmcp_{uuid.uuid4().hex[:8]}.json")
        return result

    def _one(self, policy: BenchPolicy, rec: FinMCPRecord, tools: list[dict[str, Any]], sample: int, seed: int,
             counts: list[SampleCounts], kept: list[FinMCPRecord], replay: dict[str, int]) -> dict[str, Any]:
        gold = tool_names(rec.messages)
        tracker = StageTracker()
        try:
            run = teacher_forced(StagedPolicy(policy, tracker), rec, tools, sample=sample, seed=seed,
                                 max_tool_num=self.max_tool_num)
        except Exception as exc:  # noqa: BLE001 - that sample's error, scored as a failure; the run goes on
            counts.append(SampleCounts(0, 0, len(gold), False))
            kept.append(rec)
            return failed_record(rec.id, rec.level1, sample, seed, tracker.error(exc), pred_tools=[],
                                 gold_tools=gold, tp=0, fp=0, fn=len(gold))
        pred = tool_names(run.messages_pred)
        c = SampleCounts.of(pred, gold)
        counts.append(c)
        kept.append(rec)
        for key, v in run.replay.items():
            replay[key] += v
        return {"id": rec.id, "category": rec.level1, "sample": sample, "seed": seed, "task_error": None,
                "pred_tools": pred, "gold_tools": gold, "tp": c.tp, "fp": c.fp, "fn": c.fn, "valid": c.exact,
                "reward": float(c.exact), "replay": run.replay, "queries": run.queries,
                "messages": run.messages_pred}

    def _departures(self, limit: int | None, k: int, errors: int, replay: dict[str, int]) -> list[str]:
        out = ["tools answered by a replay server from the recorded ground-truth tool messages of the same turn "
               "(official: the live Qieman MCP server); off-path calls get recorded or error results "
               f"(this run: {replay['exact']} exact, {replay['name']} name-only, {replay['miss']} unmatched answers)",
               "policy queried through envace BenchPolicy (official: OpenAI chat completions with "
               "enable_thinking=true and streaming)",
               "a malformed tool call counts as a reply without calls (official: its sample errors and is dropped)"]
        if self.tools_path is None:
            out.append("tool schemas synthesised from the ground-truth argument names (the MCP_SCHEMA file was not "
                       "given): not faithful")
        if limit is not None:
            out.append(f"only the first {limit} records")
        if k > 1:
            out.append(f"metrics pooled over k={k} samples per record (official: one)")
        if errors:
            out.append(f"{errors} (record, sample) pairs raised and score as failures (no tool predicted; the "
                       "official evaluation drops them)")
        return out
