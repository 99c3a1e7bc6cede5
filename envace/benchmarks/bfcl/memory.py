"""BFCL-v4's memory categories that run offline (`memory_kv`, `memory_rec_sum`), with BFCL's own pipeline.

As BFCL's generation script (`_llm_response_generation`): each scored memory entry depends on its
scenario's *prerequisite conversations* (`memory_prereq_conversation/memory_<scenario>.json`: the user
tells the model facts over several turns, the model writes them into the memory backend with its memory
tools). Each prerequisite continues the memory the previous one left: BFCL's `MemoryAPI` loads the
scenario's latest snapshot from the result directory and, at the end of a prerequisite conversation,
flushes it back (`BaseHandler.inference_multi_turn_FC`). The scored entries then start from the final
snapshot and answer one question; BFCL's agentic checker scores the last message that is not a tool
call: valid when it contains one of the ground-truth answers (`_evaluate_single_agentic_entry`).
Prerequisite conversations are not scored (BFCL's eval runner skips them).

What is ours: the order (per (run, sample) a fresh scratch result directory, `populate_initial_settings_
for_memory_test_cases` pointing every entry at it; the scenario's prerequisites strictly in order, then
its selected scored entries), and that only the scenarios of the selected entries get their chain run.
`memory_vector` stays unrunnable (SentenceTransformer weights at import); it needs `rank_bm25` for kv.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from copy import deepcopy
from dataclasses import replace
from functools import cache
from pathlib import Path
from typing import Any

from envace.benchmarks.bfcl.compat import load_bfcl
from envace.benchmarks.bfcl.data import BFCLEntry

RUNNABLE_MEMORY = ("memory_kv", "memory_rec_sum")


@cache
def prerequisites(category: str) -> dict[str, tuple[BFCLEntry, ...]]:
    """{scenario: its prerequisite conversations in dependency order} of a memory category (as the model
    sees them: language hints included). Entries are shared: callers copy before mutating."""
    u = load_bfcl().utils
    out: dict[str, list[BFCLEntry]] = {}
    for raw in u.load_dataset_entry(category, include_prereq=True, include_language_specific_hint=True):
        if u.is_memory_prereq(raw["id"]):
            out.setdefault(raw["scenario"], []).append(
                BFCLEntry(id=raw["id"], category=category, prompt=raw, eval_prompt=raw, ground_truth=None))
    for scenario, chain in out.items():  # each depends on every earlier one: the file order is that order
        for i, e in enumerate(chain):
            if e.prompt.get("depends_on", []) != [p.id for p in chain[:i]]:
                raise ValueError(f"BFCL {category}: prerequisite {e.id} of {scenario} is out of dependency order; "
                                 f"reinstall bfcl-eval")
    return {k: tuple(v) for k, v in out.items()}


def _with_snapshot_dir(entries: list[BFCLEntry], result_dir: Path) -> list[BFCLEntry]:
    """Copies of the entries whose `initial_config` points BFCL's MemoryAPI at `result_dir` (BFCL's own
    `populate_initial_settings_for_memory_test_cases`)."""
    prompts = load_bfcl().utils.populate_initial_settings_for_memory_test_cases(
        [deepcopy(e.prompt) for e in entries], result_dir)
    return [replace(e, prompt=p) for e, p in zip(entries, prompts)]


def run_memory_sample(entries: list[BFCLEntry], run_prereq: Callable[[BFCLEntry], dict[str, Any]],
                      run_scored: Callable[[list[BFCLEntry]], list[dict[str, Any]]]
                      ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """One sample of the selected scored entries of one memory category, in a fresh scratch result dir.

    For each scenario among `entries` (first-seen order): its prerequisite chain through `run_prereq`
    (one at a time, in order), then its scored entries through `run_scored` (a list: may run them in
    parallel; they only read the final snapshot). Returns (scored records in the order of `entries`,
    prerequisite records)."""
    if not entries:
        return [], []
    category = entries[0].category
    chains = prerequisites(category)
    scratch = Path(tempfile.mkdtemp(prefix=f"envace-bfcl-{category}-"))
    try:
        by_id: dict[str, dict[str, Any]] = {}
        prereq_records: list[dict[str, Any]] = []
        scenarios = list(dict.fromkeys(e.prompt["scenario"] for e in entries))
        for scenario in scenarios:
            for pre in _with_snapshot_dir(list(chains.get(scenario, ())), scratch):
                prereq_records.append(run_prereq(pre))
            mine = _with_snapshot_dir([e for e in entries if e.prompt["scenario"] == scenario], scratch)
            for e, rec in zip(mine, run_scored(mine)):
                by_id[e.id] = rec
        return [by_id[e.id] for e in entries], prereq_records
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
