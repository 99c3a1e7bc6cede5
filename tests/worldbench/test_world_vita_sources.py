"""Tool-world and VitaBench transitions.

World: each recorded gold response equals the tool message the task generator wrote into the task's
reference conversation (the generator builds it with its own oracle, not with WorldEnvironment); every
test task holds a held-out (shape, entity) pair that no train task holds.
VitaBench: the small checkout in VitaBench's layout (tests/fixtures/bench/vitabench) and a results file
in VitaBench's `Results` shape; calls are replayed in the checkout's environment (its stored tool text
is ignored), perturbed calls are refused by it, and a bad results file is one clear error.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from envace.execution_result import is_error_value
from envace.worldbench.build import build, record_source
from envace.worldbench.config import BuildConfig
from envace.worldbench.records import CallKind, Source, Split, read_transitions
from envace.worlds.generator import generate_tasks, held_out_pairs, task_pairs

VITA = Path(__file__).resolve().parents[1] / "fixtures" / "bench" / "vitabench"


def test_world_gold_responses_equal_the_reference_conversation():
    cfg = BuildConfig(sources=[Source.WORLD], world_train=12, world_test=12)
    recorded = record_source(cfg, Source.WORLD)
    for split in ("train", "test"):
        for task in generate_tasks(12, split, 0):
            ref = [json.loads(m.content) for m in task.messages if m.role == "tool"]
            mine = sorted([t for t in recorded if t.task_id == task.uuid and t.kind is CallKind.GOLD],
                          key=lambda t: t.position)
            assert [json.loads(t.response) for t in mine] == ref, task.uuid
    assert all(is_error_value(t.value) == t.is_error for t in recorded)
    assert any(t.is_error for t in recorded if t.kind is not CallKind.GOLD)


def test_world_test_tasks_hold_entities_kept_out_of_train():
    recorded = record_source(BuildConfig(sources=[Source.WORLD], world_train=30, world_test=30), Source.WORLD)
    train_ids = {t.task_id for t in recorded if t.split is Split.TRAIN}
    test_ids = {t.task_id for t in recorded if t.split is Split.TEST}
    assert train_ids and test_ids and not train_ids & test_ids
    held = {(d, p) for d, pairs in held_out_pairs().items() for p in pairs}
    train_pairs = {(t.domain, p) for t in generate_tasks(30, "train", 0) for p in task_pairs(t)}
    for task in generate_tasks(30, "test", 0):
        mine = {(task.domain, p) for p in task_pairs(task)}
        assert mine & held and not (mine & held) & train_pairs


@pytest.fixture
def own_vita_import():
    """VitaBench's package is imported by its name, `vita`, so a process holds one checkout's. Other tests
    import another copy in the same process (tests/benchmarks/test_vita.py builds one under tmp); set theirs
    aside while this test imports the fixture checkout's, and put it back after."""
    def vita_modules():
        return {k: m for k, m in sys.modules.items() if k == "vita" or k.startswith("vita.")}

    saved, path = vita_modules(), list(sys.path)
    for name in saved:
        del sys.modules[name]
    yield
    for name in vita_modules():
        del sys.modules[name]
    sys.modules.update(saved)
    sys.path[:] = path


def _results(tmp_path, sims):
    p = tmp_path / "results.json"
    p.write_text(json.dumps({"simulations": sims}))
    return p


def _call(name, args):
    return {"id": "x", "name": name, "arguments": args}


def test_vita_replays_calls_in_the_checkout_environment(tmp_path, own_vita_import):
    sims = [{"task_id": "D1", "messages": [
        {"role": "user", "content": "I want noodles"},
        {"role": "assistant", "content": "", "tool_calls": [_call("get_menu", {"store_id": "s1"})]},
        {"role": "tool", "id": "x", "name": "get_menu", "content": "STALE TEXT, never copied"},
        {"role": "assistant", "content": "",
         "tool_calls": [_call("place_order", {"store_id": "s1", "item": "noodles"})]},
    ]}]
    cfg = BuildConfig(sources=[Source.VITA], vita_checkout=str(VITA), vita_sets=["delivery"],
                      vita_calls=str(_results(tmp_path, sims)), out=str(tmp_path / "wb"), test_fraction=0.5)
    manifest = build(cfg)
    ts = [t for s in ("train", "test") for t in read_transitions(tmp_path / "wb" / "vita" / f"{s}.jsonl")]
    gold = sorted([t for t in ts if t.kind is CallKind.GOLD], key=lambda t: t.position)
    assert [json.loads(t.response) for t in gold] == [{"items": ["noodles", "dumplings"]},
                                                      {"id": "o1", "item": "noodles"}]
    assert gold[1].history[0] == {"role": "user", "content": "I want noodles"}
    assert gold[1].history[-1]["content"] == gold[0].response
    pert = [t for t in ts if t.kind is not CallKind.GOLD]
    assert {t.kind for t in pert} == {CallKind.WRONG_ID, CallKind.MISSING_ARG}  # no numbers or enums to push
    assert all(t.is_error and t.response.startswith("Error:") for t in pert)
    n = manifest["sources"]["vita"]["counts"]
    assert n["train"]["n"] + n["test"]["n"] == 4
    assert manifest["sources"]["vita"]["dir_md5"].endswith(".dir")


def test_vita_bad_results_file_is_one_clear_error(tmp_path):
    cfg = BuildConfig(sources=[Source.VITA], vita_checkout=str(VITA), vita_sets=["delivery"],
                      vita_calls=str(_results(tmp_path, [{"messages": []}])), out=str(tmp_path / "wb"))
    with pytest.raises(ValueError, match=r"simulations\[0\] needs 'task_id'"):
        build(cfg)
    assert not (tmp_path / "wb" / "vita").exists()  # nothing half-written
    with pytest.raises(ValueError, match="vita_checkout is not set"):
        BuildConfig(sources=[Source.VITA])


def test_build_is_versioned_with_dvc(tmp_path, monkeypatch):
    from envace.provenance.dvc_hash import content_hash

    monkeypatch.setenv("DVC_SITE_CACHE_DIR", str(tmp_path / "dvc-site-cache"))
    out = tmp_path / "data" / "worldbench"
    cfg = BuildConfig(sources=[Source.WORLD], world_train=3, world_test=3, out=str(out), dvc_repo=str(tmp_path))
    manifest = build(cfg)
    assert manifest["dvc"]["md5"] == content_hash(out)  # DVC's own record equals the hash MLflow tags carry
    assert (tmp_path / "data" / "worldbench.dvc").is_file() and manifest["dvc"]["transitions"] > 0
    first = (out / "world" / "test.jsonl").read_bytes()
    build(BuildConfig(sources=[Source.WORLD], world_train=3, world_test=3, out=str(out)))
    assert (out / "world" / "test.jsonl").read_bytes() == first  # a rebuild is byte-identical
