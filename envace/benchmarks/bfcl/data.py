"""BFCL-v4 categories and entries, read with bfcl_eval's own loaders from the data the package ships.

Each entry is loaded twice, as BFCL itself does: the *inference* view (function docs with BFCL's
language-specific hints, multi-turn docs populated, miss_func docs held back) is what the model sees; the
*eval* view (no hints) is what the checkers get (Java/JavaScript type conversion needs the original
types). Ground truth is aligned to prompts by position, as `eval_runner` aligns it.

Groups follow the leaderboard (`eval_runner_helper.generate_leaderboard_csv`). Of the agentic categories,
memory_kv and memory_rec_sum run (pure Python; BFCL's prerequisite-conversation pipeline in memory.py;
memory_kv needs `rank_bm25`); web_search needs SerpAPI and the live web and memory_vector a
SentenceTransformer at import, so those three are reported, never run. live_relevance is scored but, as on
the leaderboard, is in no group.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any

from envace.benchmarks.bfcl.compat import load_bfcl

NON_LIVE_AST = ["simple_python", "simple_java", "simple_javascript", "multiple", "parallel", "parallel_multiple"]
LIVE_AST = ["live_simple", "live_multiple", "live_parallel", "live_parallel_multiple"]
IRRELEVANCE = ["irrelevance", "live_irrelevance"]
RELEVANCE = ["live_relevance"]
MULTI_TURN = ["multi_turn_base", "multi_turn_miss_func", "multi_turn_miss_param", "multi_turn_long_context"]
WEB_SEARCH = ["web_search_base", "web_search_no_snippet"]
MEMORY = ["memory_kv", "memory_vector", "memory_rec_sum"]
MEMORY_OFFLINE = ["memory_kv", "memory_rec_sum"]  # the memory backends that run offline
RUNNABLE = NON_LIVE_AST + LIVE_AST + IRRELEVANCE + RELEVANCE + MULTI_TURN + MEMORY_OFFLINE
AGENTIC = WEB_SEARCH + MEMORY
NOT_RUNNABLE = ["web_search_base", "web_search_no_snippet", "memory_vector"]
NOT_RUNNABLE_REASON = {
    "web_search_base": "not runnable offline: needs SerpAPI (SERPAPI_API_KEY) and the live web",
    "web_search_no_snippet": "not runnable offline: needs SerpAPI (SERPAPI_API_KEY) and the live web",
    "memory_vector": ("not runnable offline: builds SentenceTransformer('all-MiniLM-L6-v2') and faiss at import "
                      "(needs downloaded weights)"),
}


def category_kind(category: str) -> str:
    """ast | relevance | multi_turn | memory (runnable agentic) | agentic (not runnable offline)."""
    if category in MEMORY_OFFLINE:
        return "memory"
    if category in AGENTIC:
        return "agentic"
    if category in MULTI_TURN:
        return "multi_turn"
    if category in IRRELEVANCE or category in RELEVANCE:
        return "relevance"
    if category in NON_LIVE_AST or category in LIVE_AST:
        return "ast"
    raise ValueError(f"unknown BFCL category {category!r}; runnable: {', '.join(RUNNABLE)}; "
                     f"not runnable offline: {', '.join(NOT_RUNNABLE)}")


@dataclass
class BFCLEntry:
    id: str
    category: str
    prompt: dict[str, Any]  # inference view (what the model sees)
    eval_prompt: dict[str, Any]  # eval view (what the checkers get)
    ground_truth: Any  # list of {func: {param: [allowed]}} (AST), list of call strings per turn, or None

    @property
    def kind(self) -> str:
        return category_kind(self.category)


@cache
def _load_all(category: str) -> tuple[BFCLEntry, ...]:
    """Every entry of a category, read once per process (BFCL re-reads the function-doc files for every
    multi-turn entry, ~2 s per category). Entries are shared: callers deep-copy before mutating."""
    u = load_bfcl().utils
    kind = category_kind(category)
    shown = u.load_dataset_entry(category, include_prereq=False, include_language_specific_hint=True)
    checked = u.load_dataset_entry(category, include_prereq=False, include_language_specific_hint=False)
    answers = None if kind == "relevance" else u.load_ground_truth_entry(category)
    if len(shown) != len(checked) or (answers is not None and len(answers) != len(shown)):
        raise ValueError(f"BFCL {category}: {len(shown)} prompts, {len(checked)} eval prompts and "
                         f"{None if answers is None else len(answers)} answers do not line up; reinstall bfcl-eval")
    if kind == "memory":  # answers are shared by the memory backends: ids say memory_<n>, prompts memory_kv_<n>
        unaligned = [a["id"] for a, p in zip(answers or [], shown) if a["id"].replace("memory", category, 1) != p["id"]]
        if unaligned:
            raise ValueError(f"BFCL {category}: answers {unaligned[:3]} do not line up with the prompts")
    return tuple(BFCLEntry(id=shown[i]["id"], category=category, prompt=shown[i], eval_prompt=checked[i],
                           ground_truth=None if answers is None else answers[i]["ground_truth"])
                 for i in range(len(shown)))


def load_category(category: str, limit: int | None = None) -> list[BFCLEntry]:
    """The first `limit` entries (all when None) of `category`, in BFCL's file order."""
    if category in NOT_RUNNABLE:
        raise ValueError(f"BFCL category {category!r} is not run here: {NOT_RUNNABLE_REASON[category]}")
    if limit is not None and limit < 1:
        raise ValueError(f"limit {limit} must be >= 1 (or None for every entry)")
    entries = _load_all(category)
    return list(entries if limit is None else entries[:limit])


@cache
def category_size(category: str) -> int:
    """Entries in the full category, agentic ones included (the leaderboard weights a category that was
    not run by its full size)."""
    if category not in NOT_RUNNABLE:
        return len(_load_all(category))
    u = load_bfcl().utils
    return len(u.load_dataset_entry(category, include_prereq=False, include_language_specific_hint=False))


def openai_tools(functions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """BFCL function docs as OpenAI tools, converted exactly as BFCL's OpenAI-compatible FC handlers do
    (`convert_to_tool(..., GORILLA_TO_OPENAPI, OPENAI_COMPLETIONS)`: dict->object, float->number with a
    note, tuple->array, any->string, and '.' in names -> '_')."""
    b = load_bfcl()
    return b.handler_utils.convert_to_tool(functions, b.type_mappings.GORILLA_TO_OPENAPI,
                                           b.enums.ModelStyle.OPENAI_COMPLETIONS)
