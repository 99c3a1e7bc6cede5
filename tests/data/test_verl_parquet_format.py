"""verl parquet rows: layout, lossless round trip, per-row errors, atomic writes."""

import json
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from envace.data import DataError, load_cm2, read_verl_parquet, to_verl_rows, write_verl_parquet
from envace.worlds import generate_tasks

FIX = Path(__file__).parent / "fixtures"


@pytest.fixture(scope="module")
def tasks():
    return generate_tasks(72, "val", seed=8) + generate_tasks(36, "test", seed=8)


def test_row_layout(tasks):
    rows = to_verl_rows(tasks[:20], data_source="toy", agent_name="loop")
    for i, (row, task) in enumerate(zip(rows, tasks[:20], strict=True)):
        assert set(row) == {"prompt", "data_source", "agent_name", "extra_info", "reward_model"}
        assert row["data_source"] == "toy" and row["agent_name"] == "loop"
        assert [m["role"] for m in row["prompt"]] == ["system", "user"]
        assert row["prompt"][1]["content"] == task.user_turns[0]
        ex = row["extra_info"]
        assert ex["index"] == i and ex["uuid"] == ex["original_index"] == task.uuid
        assert len(ex["messages"]) == len(task.messages)
        assert json.loads(ex["tools"]) == task.tools
        assert ex["interaction_kwargs"]["name"] == "checklist"
        assert json.loads(ex["interaction_kwargs"]["checklist_list"])[0] == [[it.to_dict() for it in turn]
                                                                            for turn in task.checklists]
        assert json.loads(ex["initial_state"]) == task.initial_state and ex["domain"] == task.domain
        assert row["reward_model"] == {"style": "rule", "ground_truth": json.dumps(task.meta["answers"])}
    call = next(m for m in rows[0]["extra_info"]["messages"] if m["tool_calls"])["tool_calls"][0]
    assert isinstance(call["function"]["arguments"], str)  # OpenAI wire form


def test_round_trip_is_lossless(tmp_path, tasks):
    path = write_verl_parquet(tasks, tmp_path / "train.parquet")
    assert read_verl_parquet(path) == tasks
    items = load_cm2(FIX / "cm2_good.json")  # tasks without a world, several annotations, ids
    assert read_verl_parquet(write_verl_parquet(items, tmp_path / "cm2.parquet")) == items


def _write_rows(path, rows):
    pq.write_table(pa.Table.from_pylist(rows), path)


def test_bad_rows_name_file_row_and_field(tmp_path, tasks):
    rows = to_verl_rows(tasks[:4])
    rows[1]["extra_info"]["tools"] = "{not json"
    ck = json.loads(rows[3]["extra_info"]["interaction_kwargs"]["checklist_list"])
    ck[0][0][0]["weight"] = 3.0
    rows[3]["extra_info"]["interaction_kwargs"]["checklist_list"] = json.dumps(ck)
    path = tmp_path / "bad.parquet"
    _write_rows(path, rows)
    with pytest.raises(DataError) as info:
        read_verl_parquet(path)
    found = {(p.row, p.field) for p in info.value.problems}
    assert (1, "extra_info.tools") in found
    assert (3, "extra_info.interaction_kwargs.checklist_list[0][0][*].weight") in found
    assert "bad.parquet: row 1" in str(info.value) and tasks[1].uuid in str(info.value)


def test_missing_column_and_non_parquet(tmp_path, tasks):
    rows = to_verl_rows(tasks[:2])
    for r in rows:
        del r["reward_model"]
    _write_rows(tmp_path / "cols.parquet", rows)
    with pytest.raises(DataError, match=r"row 0: field 'reward_model': column\(s\) missing"):
        read_verl_parquet(tmp_path / "cols.parquet")
    (tmp_path / "x.parquet").write_text("hello")
    with pytest.raises(DataError, match="not a readable parquet file"):
        read_verl_parquet(tmp_path / "x.parquet")


def test_checklist_list_may_be_native(tmp_path, tasks):
    rows = to_verl_rows(tasks[:1])
    ik = rows[0]["extra_info"]["interaction_kwargs"]
    ik["checklist_list"] = json.loads(ik["checklist_list"])
    from envace.data.verl_parquet import parse_verl_row

    task, problems = parse_verl_row(rows[0], "mem", 0)
    assert problems == [] and task == tasks[0]


def test_failed_write_leaves_nothing(tmp_path, tasks):
    target = tmp_path / "out.parquet"
    write_verl_parquet(tasks[:3], target)
    before = target.read_bytes()
    bad = generate_tasks(3, "val", seed=8)
    bad[0].meta["x"] = float("nan")
    with pytest.raises(DataError, match=r"out.parquet \(being written\): row 0"):
        write_verl_parquet(bad, target)
    assert target.read_bytes() == before and os.listdir(tmp_path) == ["out.parquet"]
