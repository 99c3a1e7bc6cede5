"""BFCL-v4 memory_kv and memory_rec_sum through BFCL's own memory pipeline (prerequisite conversations ->
memory snapshot -> scored question -> agentic checker), plus per-entry errors in a BFCL run.

`Memorizer` is a test double of a model that uses the memory tools: in the first prerequisite
conversation of the scenario it writes the answers of the selected questions into BFCL's memory backend
(`core_memory_add` for kv, `memory_append` for rec_sum); in a scored question it answers from the memory
BFCL shows it in the system prompt. A control policy that writes nothing scores 0, so the answers can only
have travelled through BFCL's MemoryAPI snapshot files across the prerequisite chain.
"""

from __future__ import annotations

import re

import pytest

from envace.benchmarks.bfcl import BFCLBenchmark
from envace.benchmarks.bfcl.data import load_category
from envace.benchmarks.bfcl.memory import prerequisites
from envace.benchmarks.bfcl.scoring import MEMORY_BACKEND_WEIGHT, OFFLINE_SHARE
from envace.engines.reply import AssistantReply
from envace.types import ToolCall

pytestmark = pytest.mark.usefixtures("bfcl_modules")


def _number(entry_id: str) -> str:
    return re.search(r"_(\d+)-", entry_id).group(1)


class Memorizer:
    name = "memorizer"

    def __init__(self, answers: dict[str, str], write: bool = True):
        self.answers, self.write = answers, write  # {entry number: answer}
        self.seen_prereqs: list[str] = []

    def reply(self, messages, tools, *, seed=None, context=None):
        eid = context["entry_id"]
        if "_prereq_" in eid:
            self.seen_prereqs.append(eid)
            first = eid.endswith("-0") and context["turn"] == 0 and context["step"] == 0
            if not (first and self.write):
                return AssistantReply(content="Noted.")
            names = {t["function"]["name"] for t in tools}
            if "core_memory_add" in names:
                calls = [ToolCall("core_memory_add", {"key": f"answer_{n}", "value": a})
                         for n, a in self.answers.items()]
            else:
                text = "; ".join(f"answer_{n}: {a}" for n, a in self.answers.items())
                calls = [ToolCall("memory_append", {"text": text})]
            return AssistantReply(tool_calls=calls, finish_reason="tool_calls")
        memory = messages[0]["content"]  # BFCL puts the memory (core memory / the summary) in the system prompt
        found = re.search(rf'answer_{_number(eid)}"?: "?([^";\n]+)', memory)
        return AssistantReply(content=f"It is {found.group(1)}." if found else "I do not remember that.")


@pytest.mark.parametrize("category", ["memory_kv", "memory_rec_sum"])
def test_memory_flows_from_prerequisites_to_scored_questions(category):
    entries = load_category(category, 2)
    answers = {_number(e.id): e.ground_truth[0] for e in entries}
    chain = prerequisites(category)[entries[0].prompt["scenario"]]
    pol = Memorizer(answers)
    res = BFCLBenchmark([category]).run(pol, limit=2)
    assert res.categories[category].accuracy == 1.0 and res.categories[category].entries == 2
    assert sorted(set(pol.seen_prereqs)) == sorted(e.id for e in chain)  # the whole chain ran, in BFCL's ids
    assert res.meta["memory_prerequisites"] == {"runs": len(chain), "errors": 0}
    control = BFCLBenchmark([category]).run(Memorizer(answers, write=False), limit=2)
    assert control.categories[category].accuracy == 0.0
    assert {r["error_type"] for r in control.records} == {"agentic:answer_not_found"}
    # headline: official weights over what runs offline; only this memory backend ran (the rest count 0)
    assert res.groups["overall_offline"] == pytest.approx(MEMORY_BACKEND_WEIGHT / (100 * OFFLINE_SHARE))
    assert res.groups["memory_offline"] == pytest.approx(0.5) and "memory_offline" in res.meta["partial_groups"]
    assert res.meta["categories_run"] == [category]


def test_one_entry_raising_is_that_entrys_error_and_the_others_are_scored():
    from envace.benchmarks.bfcl.gold import BFCLGoldPolicy

    entries = load_category("simple_python", 3)

    class Flaky(BFCLGoldPolicy):
        def reply(self, messages, tools, *, seed=None, context=None):
            if context["entry_id"] == "simple_python_1":
                raise ConnectionError("server went away")
            return super().reply(messages, tools, seed=seed, context=context)

    res = BFCLBenchmark(["simple_python"]).run(Flaky(entries), limit=3)
    by = {r["id"]: r for r in res.records}
    assert by["simple_python_0"]["valid"] and by["simple_python_2"]["valid"]
    bad = by["simple_python_1"]
    assert bad["valid"] is False and bad["inference_error"] is True
    assert bad["task_error"] == {"stage": "policy", "type": "ConnectionError", "message": "server went away"}
    assert res.categories["simple_python"].accuracy == pytest.approx(2 / 3)
    assert res.meta["task_errors"]["by_cause"] == {"policy: ConnectionError": 1}
    assert res.error_summary().startswith("bfcl: 1 of 3 task runs errored")
