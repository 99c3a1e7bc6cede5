"""`envace data add` refuses what training would refuse, with the same loaders and the same one line: a
message (or a row's tool schemas) over the message budget and any lone surrogate (`\\ud800`: no tokenizer
encodes it) name the file, row and field; nothing is versioned. Training on the same file stops at loading,
before the model sees a token, in bounded memory (measured in a fresh process)."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from envace.data import DataError
from envace.data.cm2 import load_cm2, task_to_cm2
from envace.data.config import DataConfig
from envace.data.tasks import load_tasks
from envace.data.versioning import STORAGE_DIR, add_dataset
from envace.worlds import generate_tasks

ROOT = Path(__file__).resolve().parents[2]
BIG = "y" * 1_500_000  # over the 1 MB message budget


@pytest.fixture(autouse=True)
def _private_dvc_site_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("DVC_SITE_CACHE_DIR", str(tmp_path / "dvc-site-cache"))


def _item() -> dict:
    return copy.deepcopy(task_to_cm2(generate_tasks(1, "train", 0)[0]))  # the generator may share its values


def _first_call(item: dict) -> dict:
    return next(c for m in item["messages"] for c in m.get("tool_calls") or [])


def _spoil(kind: str) -> tuple[dict, str, str]:
    """(item, field the error names, what it says)."""
    item = _item()
    if kind == "big_content":
        item["messages"][0]["content"] = BIG
        return item, "messages[0]", "the message's text is 1500"
    if kind == "big_arguments":
        _first_call(item)["function"]["arguments"] = {"note": BIG}
        i = next(i for i, m in enumerate(item["messages"]) if m.get("tool_calls"))
        return item, f"messages[{i}]", "the message's text is 1500"
    if kind == "big_tools":
        item["tools"][0]["function"]["description"] = BIG
        return item, "tools", "the text of the tool schemas is 1500"
    if kind == "surrogate_content":
        item["messages"][0]["content"] = "caf\ud800"
        return item, "messages[0].content", "lone surrogate"
    if kind == "surrogate_arguments":
        _first_call(item)["function"]["arguments"] = {"city": "\udfff"}
        i = next(i for i, m in enumerate(item["messages"]) if m.get("tool_calls"))
        return item, f"messages[{i}].tool_calls[0].function.arguments.city", "lone surrogate"
    if kind == "surrogate_checklist":
        item["checklists"][0][0][0]["question"] = "ok?\ud83d"
        return item, "checklists[0][0][0].question", "lone surrogate"
    raise AssertionError(kind)


KINDS = ["big_content", "big_arguments", "big_tools", "surrogate_content", "surrogate_arguments",
         "surrogate_checklist"]


@pytest.mark.parametrize("kind", KINDS)
def test_data_add_refuses_what_training_refuses(tmp_path, kind):
    item, field, what = _spoil(kind)
    data = tmp_path / "bad.jsonl"
    data.write_text(json.dumps(item) + "\n")  # ensure_ascii: a lone surrogate is written as its \\u escape
    with pytest.raises(DataError) as err:
        add_dataset(data, tmp_path)
    p = err.value.problems[0]
    assert (p.file, p.row, p.line, p.field) == (str(data), 0, 1, field) and what in p.what, p
    if kind.startswith("big"):
        assert "over the limit of 1000000" in p.what and "ENVACE_MAX_MESSAGE_BYTES" in p.fix
    assert not data.with_name(data.name + ".dvc").exists() and not (tmp_path / STORAGE_DIR).exists()
    with pytest.raises(DataError) as again:  # the loader training uses says the same
        load_tasks(DataConfig(source="cm2", path=str(data)))
    assert again.value.problems == err.value.problems


def test_the_message_budget_is_a_setting_and_a_valid_file_still_loads(tmp_path, monkeypatch):
    item, _, _ = _spoil("big_content")
    data = tmp_path / "big.jsonl"
    data.write_text(json.dumps(item) + "\n")
    monkeypatch.setenv("ENVACE_MAX_MESSAGE_BYTES", "2000000")
    assert [t.messages[0].content for t in load_cm2(data)] == [BIG]
    ok = tmp_path / "ok.json"
    ok.write_text(json.dumps([_item()]))
    monkeypatch.delenv("ENVACE_MAX_MESSAGE_BYTES")
    assert len(load_cm2(ok)) == 1


def test_a_jsonl_line_over_the_record_budget_is_refused_before_decoding(tmp_path, monkeypatch):
    data = tmp_path / "rows.jsonl"
    line = json.dumps(_item())
    data.write_text(line + "\n" + "[" * 5000 + "\n")  # the second line would be too deep to decode
    monkeypatch.setenv("ENVACE_MAX_RECORD_BYTES", "4000")
    with pytest.raises(DataError) as err:
        load_cm2(data)
    p = err.value.problems[-1]
    assert p.line == 2 and "the line is 5000 bytes, over the limit of 4000" in p.what
    assert "ENVACE_MAX_RECORD_BYTES" in p.fix


TRAIN = """
import json, resource, subprocess, sys
out = subprocess.run([sys.executable, "-m", "envace.cli", "train", "model=" + sys.argv[1], "steps=1",
                      "out_dir=" + sys.argv[3], "data.source=cm2", "data.path=" + sys.argv[2], "threads=1",
                      "progress=false", "tracking.enabled=false"], capture_output=True, text=True)
peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
print(json.dumps({"rc": out.returncode, "stderr": out.stderr, "peak_mb": peak}))
"""


def test_envace_train_on_an_oversized_message_stops_at_loading_in_bounded_memory(tiny_dir, tmp_path):
    item = _item()
    item["messages"][0]["content"] = "z " * 2_500_000  # 5 MB: tokenising it alone takes far over a GB
    data = tmp_path / "huge.jsonl"
    data.write_text(json.dumps(item) + "\n")
    res = subprocess.run([sys.executable, "-c", TRAIN, str(tiny_dir), str(data), str(tmp_path / "run")], cwd=ROOT,
                         capture_output=True, text=True, timeout=600,
                         env={**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"})
    out = json.loads(res.stdout.strip().splitlines()[-1])
    lines = out["stderr"].strip().splitlines()
    assert out["rc"] == 2 and len(lines) == 1, out["stderr"][-2000:]
    assert lines[0].startswith("error: bad data: the message's text is 50000") and str(data) in lines[0]
    assert "ENVACE_MAX_MESSAGE_BYTES" in lines[0]
    assert out["peak_mb"] < 600, out  # the interpreter, torch and the 5 MB file; not the tokenised prompt
