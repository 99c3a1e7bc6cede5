"""BFCL transitions: recorded through bfcl_eval's executor, checked against BFCL's classes called directly.

The check does not go through `execute_multi_turn_func_call` (what the builder uses): it imports each
involved class from bfcl_eval's backend modules, loads the entry's initial config with `_load_scenario`,
calls the method with keyword arguments and stringifies the result as BFCL does (text as is, a dict as
JSON, anything else `str`; an exception "Error during execution: <message>"). Every recorded gold
response, and every perturbed one after its gold prefix, must equal it. Needs bfcl-eval (skips otherwise).
"""

from __future__ import annotations

import copy
import importlib
import json

import pytest

from envace.execution_result import is_error_value
from envace.worldbench.build import counts, record_source
from envace.worldbench.config import BuildConfig
from envace.worldbench.records import CallKind, Source, Split


@pytest.fixture(scope="module")
def recorded(bfcl_modules):
    return record_source(BuildConfig(sources=[Source.BFCL], bfcl_limit=12), Source.BFCL)


def _instances(entry):
    from bfcl_eval.constants.executable_backend_config import CLASS_FILE_PATH_MAPPING, STATELESS_CLASSES

    out = []
    for name in entry.prompt["involved_classes"]:
        inst = getattr(importlib.import_module(CLASS_FILE_PATH_MAPPING[name]), name)()
        if name not in STATELESS_CLASSES:
            inst._load_scenario(copy.deepcopy(entry.prompt["initial_config"].get(name, {})), long_context=False)
        out.append(inst)
    return out


def _direct(instances, call):
    fn = next(getattr(i, call["name"]) for i in instances if hasattr(i, call["name"]))
    try:
        r = fn(**call["arguments"])
    except Exception as e:  # noqa: BLE001 - as BFCL's executor reports it
        return f"Error during execution: {e}"
    return r if isinstance(r, str) else json.dumps(r) if isinstance(r, dict) else str(r)


def test_every_recorded_response_is_what_bfcl_classes_return(recorded):
    from envace.benchmarks.bfcl.data import load_category

    entries = {e.id: e for e in load_category("multi_turn_base", 12)}
    assert {t.task_id for t in recorded} == set(entries)
    checked = 0
    for entry_id, entry in entries.items():
        mine = [t for t in recorded if t.task_id == entry_id]
        gold = sorted([t for t in mine if t.kind is CallKind.GOLD], key=lambda t: t.position)
        inst = _instances(entry)
        for t in gold:
            assert _direct(inst, t.call) == t.response, t.id
            checked += 1
        for p in (t for t in mine if t.kind is not CallKind.GOLD):
            inst = _instances(entry)
            for t in gold[:p.position]:
                _direct(inst, t.call)
            assert _direct(inst, p.call) == p.response, p.id
            checked += 1
    assert checked == len(recorded)


def test_history_holds_the_turns_user_messages_and_earlier_calls(recorded):
    t = next(t for t in recorded if t.kind is CallKind.GOLD and t.position == 1)
    roles = [m["role"] for m in t.history]
    assert roles[0] == "user" and roles.count("tool") == 1 and roles[-1] == "tool"
    assert t.history[-1]["content"] == next(x.response for x in recorded if x.task_id == t.task_id
                                            and x.kind is CallKind.GOLD and x.position == 0)
    assert t.result_schema is not None and t.result_schema["type"] == "object"


def test_split_errors_and_counts(recorded):
    assert all(is_error_value(t.value) == t.is_error for t in recorded)
    assert {t.split for t in recorded} == {Split.TRAIN, Split.TEST}
    again = record_source(BuildConfig(sources=[Source.BFCL], bfcl_limit=12), Source.BFCL)
    assert [t.to_dict() for t in again] == [t.to_dict() for t in recorded]  # deterministic
    c = counts(recorded)
    assert c["train"]["perturbed_errors"] + c["test"]["perturbed_errors"] > 0
    assert all(not t.is_error for t in recorded if t.kind is CallKind.GOLD)  # BFCL's gold calls succeed
