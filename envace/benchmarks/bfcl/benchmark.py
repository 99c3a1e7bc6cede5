"""`BFCLBenchmark`: BFCL-v4 run end to end against any `BenchPolicy` and scored with BFCL's own code.

For each selected category, each of the first `limit` entries (all when None) and each of k samples:
BFCL's inference loop (runner.py) -> BFCL's per-entry evaluator (scoring.py) -> one record. Category
accuracy is Avg@k (mean over entries x samples); groups and overalls follow the leaderboard (scoring.py).

Departures from the official BFCL run, all listed in every result:
- the model is queried through OpenAI chat completions with tools (BFCL's OpenAI-compatible FC handler
  path, `underscore_to_dot`); BFCL's local Qwen3 FC handler instead renders the raw function docs with
  its own template and calls the completions endpoint;
- the agentic categories (web search, memory: 40 % of the overall) are not run;
- `limit` and k > 1 change what is averaged (official: every entry, one sample);
- the stand-in model registry when the provider SDKs are absent (compat.py).
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from envace.benchmarks.base import BenchmarkResult, CategoryScore
from envace.engines.reply import BenchPolicy
from envace.benchmarks.bfcl.compat import CHECKER_MODEL, load_bfcl
from envace.benchmarks.bfcl.data import AGENTIC, NOT_RUNNABLE_REASON, RUNNABLE, BFCLEntry, category_kind, load_category
from envace.benchmarks.bfcl.runner import infer, make_handler, release_instances
from envace.benchmarks.bfcl.scoring import AGENTIC_SHARE, aggregate, score_entry

CHECKER_EXCEPTION = "envace:checker_exception"  # BFCL's checker raised on this output; scored invalid
OVERALL_DEFINITION = ("BFCL-v4 leaderboard overall with the agentic 40 % left out and the weights renormalised: "
                      "(10 non-live + 10 live + 10 irrelevance + 30 multi-turn) / 60; "
                      "groups['overall_official_agentic_as_0'] is the official formula with agentic scored 0")


class BFCLBenchmark:
    name = "bfcl"

    def __init__(self, categories: Sequence[str] | None = None, workers: int = 1, quiet: bool = True,
                 out_dir: str | Path | None = None) -> None:
        cats = list(categories) if categories is not None else list(RUNNABLE)
        for c in cats:
            category_kind(c)  # unknown names raise with the valid list
        if workers < 1:
            raise ValueError(f"workers {workers} must be >= 1")
        self.categories, self.workers, self.quiet = cats, workers, quiet
        self.out_dir = Path(out_dir) if out_dir is not None else None

    def run(self, policy: BenchPolicy, *, limit: int | None = None, k: int = 1, seed: int = 0) -> BenchmarkResult:
        if k < 1:
            raise ValueError(f"k {k} must be >= 1")
        b = load_bfcl()
        run_id = uuid.uuid4().hex[:8]
        records: list[dict[str, Any]] = []
        scores: dict[str, CategoryScore] = {}
        quiet = contextlib.redirect_stdout(_Discard()) if self.quiet else contextlib.nullcontext()
        with quiet:  # BFCL's loop prints every step of every turn
            for cat in self.categories:
                if category_kind(cat) == "agentic":
                    continue
                entries = load_category(cat, limit)
                cat_records = []
                for sample in range(k):
                    cat_records += self._run_sample(policy, entries, f"envace_{run_id}_s{sample}", seed, sample)
                correct = sum(r["valid"] for r in cat_records)
                scores[cat] = CategoryScore(cat, correct / len(cat_records), correct, len(cat_records), len(entries))
                records += cat_records
        for cat in AGENTIC:
            scores[cat] = CategoryScore(cat, None, runnable=False, note=f"not run: {NOT_RUNNABLE_REASON[cat]}")
        groups, partial = aggregate({c: (s.accuracy, s.entries) for c, s in scores.items() if s.accuracy is not None})
        errors = sum(r["inference_error"] for r in records)
        crashes = sum(r["error_type"] == CHECKER_EXCEPTION for r in records)
        result = BenchmarkResult(
            benchmark="bfcl", categories=scores, groups=groups, overall=groups["overall_no_agentic"],
            overall_definition=OVERALL_DEFINITION, departures=self._departures(limit, k, partial, errors, crashes),
            models={"policy": getattr(policy, "name", type(policy).__name__), "user_simulator": None, "judge": None},
            k=k, limit=limit, seed=seed, records=records,
            meta={"bfcl_eval_version": b.version, "checker_model_entry": CHECKER_MODEL, "partial_groups": partial,
                  "agentic_share": AGENTIC_SHARE, "inference_errors": errors, "checker_exceptions": crashes,
                  "stand_in_model_registry": b.stand_in_model_registry,
                  "mean_entry_seconds": sum(r["seconds"] for r in records) / max(len(records), 1)})
        if self.out_dir is not None:
            result.save(self.out_dir / f"bfcl_{run_id}.json")
        return result

    def _run_sample(self, policy: BenchPolicy, entries: list[BFCLEntry], tag: str, seed: int,
                    sample: int) -> list[dict[str, Any]]:
        def one(entry: BFCLEntry) -> dict[str, Any]:
            handler = make_handler(policy, tag, seed, sample)  # one per entry: handlers hold the current entry
            return run_entry(handler, entry, sample)

        if self.workers == 1:
            return [one(e) for e in entries]
        with ThreadPoolExecutor(self.workers) as pool:
            return list(pool.map(one, entries))

    def _departures(self, limit: int | None, k: int, partial: list[str], errors: int, crashes: int) -> list[str]:
        b = load_bfcl()
        out = ["model queried through OpenAI chat completions with tools (BFCL's OpenAI-compatible FC handler "
               "path: BFCL tool docs converted with convert_to_tool, '.' in names -> '_'); BFCL's local Qwen3 FC "
               "handler instead sends the raw docs through its own prompt template",
               f"agentic categories (web_search, memory; {AGENTIC_SHARE:.0%} of the official overall) not run; "
               "headline overall renormalises the other 60 %"]
        if limit is not None:
            out.append(f"only the first {limit} entries of each category (official: all); the live group's "
                       f"count weights use the evaluated counts")
        if k > 1:
            out.append(f"Avg@{k}: each entry sampled {k} times and averaged (official: one run)")
        if partial:
            out.append(f"categories not selected count 0 in groups {partial} (as on the leaderboard)")
        if errors:
            out.append(f"{errors} (entry, sample) pairs ended in an inference error and score as BFCL scores "
                       f"the 'Error during inference' string")
        if crashes:
            out.append(f"BFCL's checker raised on {crashes} outputs; they score 0 (BFCL's own runner would stop)")
        if b.stand_in_model_registry:
            out.append("bfcl_eval's model registry replaced by a one-entry stand-in (provider SDKs not installed); "
                       "checker logic unchanged")
        return out


def run_entry(handler: Any, entry: BFCLEntry, sample: int = 0) -> dict[str, Any]:
    """Infer + score one entry; the record holds the verdict, BFCL's error fields and the raw result."""
    start = time.perf_counter()
    out = infer(handler, entry)
    result = out["result"]
    inference_error = isinstance(result, str) and result.startswith("Error during inference")
    try:
        verdict = score_entry(handler, entry, result, handler.model_name_underline_replaced)
    except Exception as exc:  # model output must never crash a run; BFCL's runner would stop here
        verdict = {"valid": False, "error_type": CHECKER_EXCEPTION, "error": [f"{type(exc).__name__}: {exc}"]}
    finally:
        release_instances(handler, entry.id)
    make_safe = load_bfcl().utils.make_json_serializable
    return {"id": entry.id, "category": entry.category, "sample": sample, "valid": bool(verdict.get("valid")),
            "error_type": None if verdict.get("valid") else _error_type(verdict),
            "error": None if verdict.get("valid") else make_safe(_error_summary(verdict)),
            "result": make_safe(result), "inference_error": inference_error,
            "queries": len(handler.replies), "seconds": time.perf_counter() - start,
            "input_tokens": sum(int(r.usage.get("prompt_tokens", 0) or 0) for r in handler.replies),
            "output_tokens": sum(int(r.usage.get("completion_tokens", 0) or 0) for r in handler.replies)}


class _Discard:
    """A write-only text sink (BFCL's step-by-step prints)."""

    def write(self, text: str) -> int:
        return len(text)

    def flush(self) -> None:
        pass


def _error_summary(verdict: dict[str, Any]) -> Any:
    """BFCL's error message without the bulky execution details (full backend states for multi-turn)."""
    err = verdict.get("error")
    if isinstance(err, dict):
        return {k: err[k] for k in ("error_message", "error_type") if k in err}
    return err


def _error_type(verdict: dict[str, Any]) -> str | None:
    if "error_type" in verdict:
        return verdict["error_type"]
    err = verdict.get("error")
    return err.get("error_type") if isinstance(err, dict) else None
