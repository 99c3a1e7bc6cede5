"""Score BFCL entries with BFCL's own evaluators and aggregate as the leaderboard does.

Per entry, `eval_runner`'s own functions run unchanged: `_evaluate_single_ast_entry` (FC decode, output
format check, `ast_checker`), `_evaluate_single_relevance_entry` (irrelevance: no call decodes;
relevance: at least one does) and `_evaluate_single_multi_turn_entry` (force-quit check, per-step decode,
`multi_turn_checker`: state and response checks after every turn against the ground truth executed on
fresh backend instances). The AST checker is given the `qwen3-8b-FC` registry entry, whose only effect is
`underscore_to_dot=True`, matching the '.' -> '_' renaming of our OpenAI tool schemas.

Memory entries (memory_kv, memory_rec_sum) go to `_evaluate_single_agentic_entry` (the last non-call
message must contain a ground-truth answer).

Aggregation copies the group structure of `eval_runner_helper.generate_leaderboard_csv` and calls its
helpers (`calculate_unweighted_accuracy`, `calculate_weighted_accuracy`,
`calculate_percentage_weighted_accuracy`, `get_category_score`); a test checks the numbers against
`generate_leaderboard_csv` itself. Overall = 10 % non-live + 10 % live + 10 % irrelevance + 30 %
multi-turn + 40 % agentic, agentic = mean(web search, memory), memory = mean(kv, vector, rec_sum): so
web search is 20 % and each memory backend 20/3 %. Offline, web search (20 %) and memory_vector (20/3 %)
cannot run, so three overalls are reported:
- `overall_official` (`overall_official_agentic_as_0` kept as an alias name for older readers): what
  BFCL's code prints for this run, the categories that cannot run counting 0;
- `overall_offline`, the headline: the same weights renormalised over the 73.3 % that can run offline,
  (10 NL + 10 L + 10 Irr + 30 MT + 20/3 kv + 20/3 rec_sum) / 73.3; selected-but-not-run categories
  still count 0, as on the leaderboard;
- `overall_no_agentic`: renormalised over the 60 % without any agentic category (the earlier headline).
None is the paper's BFCL-v4 number, whose agentic share includes web search and memory_vector.
"""

from __future__ import annotations

from copy import deepcopy
from typing import Any

from envace.benchmarks.bfcl.compat import CHECKER_MODEL, load_bfcl
from envace.benchmarks.bfcl.data import (
    IRRELEVANCE,
    LIVE_AST,
    MEMORY,
    MEMORY_OFFLINE,
    MULTI_TURN,
    NON_LIVE_AST,
    WEB_SEARCH,
    BFCLEntry,
    category_size,
)

LEADERBOARD_WEIGHTS: dict[str, float] = {"non_live": 10, "live": 10, "irrelevance": 10, "multi_turn": 30,
                                         "agentic": 40}
AGENTIC_SHARE = LEADERBOARD_WEIGHTS["agentic"] / sum(LEADERBOARD_WEIGHTS.values())
# Each memory backend's share of the official overall: agentic 40 = 20 web search + 20 memory, memory = mean of 3.
MEMORY_BACKEND_WEIGHT = LEADERBOARD_WEIGHTS["agentic"] / 2 / len(MEMORY)
OFFLINE_SHARE = (sum(LEADERBOARD_WEIGHTS.values()) - LEADERBOARD_WEIGHTS["agentic"]
                 + MEMORY_BACKEND_WEIGHT * len(MEMORY_OFFLINE)) / sum(LEADERBOARD_WEIGHTS.values())


def score_entry(handler: Any, entry: BFCLEntry, result: Any, eval_model_name: str) -> dict[str, Any]:
    """BFCL's verdict for one entry: {"valid": bool, ...error fields}. `eval_model_name` names the fresh
    backend instances of the multi-turn check (unique per run and sample)."""
    b = load_bfcl()
    er, u = b.eval_runner, b.utils
    prompt = deepcopy(entry.eval_prompt)  # the evaluators delete / mutate fields
    if entry.kind == "ast":
        if u.is_java(entry.category):
            lang, fmt = b.enums.Language.JAVA, b.enums.ReturnFormat.JAVA
        elif u.is_js(entry.category):
            lang, fmt = b.enums.Language.JAVASCRIPT, b.enums.ReturnFormat.JAVASCRIPT
        else:
            lang, fmt = b.enums.Language.PYTHON, b.enums.ReturnFormat.PYTHON
        return er._evaluate_single_ast_entry(handler, entry.id, result, entry.ground_truth, prompt, CHECKER_MODEL,
                                             entry.category, language=lang, return_format=fmt,
                                             has_tool_call_tag=False)
    if entry.kind == "relevance":
        return er._evaluate_single_relevance_entry(handler, entry.id, result, prompt, CHECKER_MODEL, entry.category)
    if entry.kind == "multi_turn":
        return er._evaluate_single_multi_turn_entry(handler, entry.id, result, entry.ground_truth, prompt,
                                                    eval_model_name, entry.category)
    if entry.kind == "memory":
        return er._evaluate_single_agentic_entry(handler, entry.id, result, entry.ground_truth, prompt,
                                                 CHECKER_MODEL, entry.category)
    raise ValueError(f"BFCL category {entry.category!r} ({entry.kind}) cannot be scored offline")


def _score(accuracy: float, count: int) -> dict[str, Any]:
    return {"accuracy": accuracy, "total_count": count, "display_accuracy": accuracy}


def aggregate(accuracies: dict[str, tuple[float, int]]) -> tuple[dict[str, float | None], list[str]]:
    """Group scores from {category: (accuracy, evaluated entries)}; returns (groups, partial group names).

    A category that was not evaluated counts 0 and makes its group partial, exactly as on the leaderboard
    (`get_category_score` gives it accuracy 0 and display "N/A"). The agentic group is the leaderboard's
    (web search and memory_vector count 0 offline: never partial for that reason); `memory_offline` is
    the mean of the offline memory backends. See the module docstring for the three overalls.
    """
    h = load_bfcl().helper
    table = {c: _score(acc, n) for c, (acc, n) in accuracies.items()}

    def cat(name: str) -> dict[str, Any]:
        if name in table:
            return h.get_category_score(table, name)
        # What get_category_score returns for a category that was not run (0, full size, display N/A),
        # with the size cached: get_category_score re-reads the whole category file every call.
        return {"accuracy": 0, "total_count": category_size(name), "display_accuracy": "N/A"}

    simple = h.calculate_unweighted_accuracy([cat(c) for c in NON_LIVE_AST[:3]])
    non_live = h.calculate_unweighted_accuracy([simple] + [cat(c) for c in NON_LIVE_AST[3:]],
                                               display_na_if_category_missing=False)
    live = h.calculate_weighted_accuracy([cat(c) for c in LIVE_AST], display_na_if_category_missing=False)
    irrelevance = h.calculate_unweighted_accuracy([cat(c) for c in IRRELEVANCE])
    multi_turn = h.calculate_unweighted_accuracy([cat(c) for c in MULTI_TURN], display_na_if_category_missing=False)
    web_search = h.calculate_unweighted_accuracy([cat(c) for c in WEB_SEARCH], display_na_if_category_missing=False)
    memory = h.calculate_unweighted_accuracy([cat(c) for c in MEMORY], display_na_if_category_missing=False)
    agentic = h.calculate_unweighted_accuracy([web_search, memory], display_na_if_category_missing=False)
    groups_in = {"non_live": non_live, "live": live, "irrelevance": irrelevance, "multi_turn": multi_turn}
    official = h.calculate_percentage_weighted_accuracy(
        list(groups_in.values()) + [agentic], [LEADERBOARD_WEIGHTS[g] for g in list(groups_in) + ["agentic"]],
        display_na_if_category_missing=False)
    offline = h.calculate_percentage_weighted_accuracy(
        list(groups_in.values()) + [cat(c) for c in MEMORY_OFFLINE],
        [LEADERBOARD_WEIGHTS[g] for g in groups_in] + [MEMORY_BACKEND_WEIGHT] * len(MEMORY_OFFLINE),
        display_na_if_category_missing=False)
    no_agentic = h.calculate_percentage_weighted_accuracy(
        list(groups_in.values()), [LEADERBOARD_WEIGHTS[g] for g in groups_in], display_na_if_category_missing=False)
    members = {"non_live": NON_LIVE_AST, "live": LIVE_AST, "irrelevance": IRRELEVANCE, "multi_turn": MULTI_TURN,
               "memory_offline": MEMORY_OFFLINE}
    partial = [g for g, cats in members.items() if any(c not in table for c in cats)]
    ran_memory = [accuracies[c][0] for c in MEMORY_OFFLINE if c in accuracies]
    groups: dict[str, float | None] = {
        "simple_ast": simple["accuracy"], **{g: v["accuracy"] for g, v in groups_in.items()},
        "memory_offline": sum(ran_memory) / len(MEMORY_OFFLINE) if ran_memory else None,
        "memory": memory["accuracy"], "web_search": None, "agentic": agentic["accuracy"],
        "live_relevance": accuracies["live_relevance"][0] if "live_relevance" in accuracies else None,
        "overall_official": official["accuracy"], "overall_official_agentic_as_0": official["accuracy"],
        "overall_offline": offline["accuracy"], "overall_no_agentic": no_agentic["accuracy"]}
    return groups, partial


__all__ = ["AGENTIC_SHARE", "LEADERBOARD_WEIGHTS", "MEMORY_BACKEND_WEIGHT", "OFFLINE_SHARE", "aggregate",
           "score_entry"]
