"""CM2 loader/writer: hand-written fixtures, broken files, atomic writes, lossless world round trips."""

import json
import os
from pathlib import Path

import pytest

from envace.data import DataError, load_cm2, write_cm2
from envace.rewards.checklist import all_checklists
from envace.types import ToolCall
from envace.worlds import generate_tasks

FIX = Path(__file__).parent / "fixtures"


def test_loads_hand_written_items():
    weather, travel, notes = load_cm2(FIX / "cm2_good.json")
    assert weather.uuid == "weather-1" and weather.user_turns == ["What's the weather in Paris?"]
    # arguments given as a JSON string are decoded; content null becomes ""
    assert weather.messages[2].tool_calls == [ToolCall("get_weather", {"city": "Paris"}, id="call_0")]
    assert weather.messages[2].content == ""
    assert [i.weight for i in weather.checklists[0]] == [0.6, 0.4]
    assert weather.checklists[0][1].extra_info == {} and weather.checklists[0][1].dependence == ["c1"]

    assert len(travel.user_turns) == 2 and len(travel.checklists) == 2
    assert travel.checklists[0][0].required_for_next_turn and not travel.checklists[1][0].required_for_next_turn
    assert [i.weight for i in travel.checklists[1]] == [0.7, 0.3]
    assert travel.gold_calls() == [[ToolCall("search_flights", {"src": "Rome", "dst": "Oslo", "date": "05-03"})],
                                   [ToolCall("book_flight", {"flight_id": "F7"})]]
    assert travel.domain == "" and travel.initial_state is None

    # two annotations: the second is kept, with int id normalised and unknown keys preserved
    sets = all_checklists(notes)
    assert len(sets) == 2 and [i.id for i in sets[1][0]] == ["n1", "2"]
    assert sets[1][0][1].extra_info == {"cm2_unknown_fields": {"annotator_note": "lenient"}}


@pytest.mark.parametrize("name, row, field", [
    ("bad_weights.json", 1, "checklists[0][1][*].weight"),
    ("bad_turns.json", 0, "checklists[0]"),
    ("bad_role.jsonl", 1, "messages[1].role"),
    ("bad_syntax.jsonl", 1, "<row>"),
    ("bad_arguments.json", 0, "messages[2].tool_calls[0].function.arguments"),
    ("missing_uuid.json", 1, "uuid"),
    ("bad_item.json", 0, "checklists[0][0][0].question"),
    ("duplicate_uuid.jsonl", 1, "uuid"),
    ("bad_world_state.json", 0, "extra_info.envace.initial_state.stock.rice"),
    ("bad_world_gold.json", 0, "extra_info.envace.initial_state"),
])
def test_every_broken_fixture_names_file_row_and_field(name, row, field):
    with pytest.raises(DataError) as info:
        load_cm2(FIX / name)
    msg = str(info.value)
    assert name in msg and f"row {row}" in msg and f"field '{field}'" in msg and "fix:" in msg
    assert any(p.row == row and p.field == field for p in info.value.problems)


def test_problem_details():
    with pytest.raises(DataError) as info:
        load_cm2(FIX / "bad_item.json")
    fields = {p.field for p in info.value.problems}
    assert {"checklists[0][0][0].question", "checklists[0][0][1].weight"} <= fields
    assert all(p.uuid == "weather-1" for p in info.value.problems)
    with pytest.raises(DataError, match=r"row 1 \(line 2\).*uuid 'travel-2'|row 1 \(line 2\)"):
        load_cm2(FIX / "bad_role.jsonl")
    with pytest.raises(DataError, match="weights|sum to 0.9000, not 1"):
        load_cm2(FIX / "bad_weights.json")


def test_world_fixture_loads_and_verifies():
    (task,) = load_cm2(FIX / "world_good.json")
    assert task.domain == "shop" and task.initial_state["stock"]["rice"] > 0 and task.meta["shape"] == "receive"


@pytest.mark.parametrize("suffix", [".json", ".jsonl"])
def test_world_tasks_round_trip_losslessly(tmp_path, suffix):
    tasks = generate_tasks(72, "train", seed=9) + generate_tasks(36, "test", seed=9)
    path = write_cm2(tasks, tmp_path / f"world{suffix}")
    assert load_cm2(path) == tasks
    first = path.read_text().lstrip()[0]
    assert first == ("[" if suffix == ".json" else "{")


def test_cm2_items_round_trip(tmp_path):
    items = load_cm2(FIX / "cm2_good.json")
    assert load_cm2(write_cm2(items, tmp_path / "again.json")) == items


def test_failed_write_leaves_nothing(tmp_path):
    tasks = generate_tasks(3, "train", seed=1)
    target = tmp_path / "out.jsonl"
    tasks[2].meta["bad"] = {1, 2}  # a set: JSON cannot hold it
    with pytest.raises(DataError, match="JSON cannot encode"):
        write_cm2(tasks, target)
    assert os.listdir(tmp_path) == []

    good = generate_tasks(2, "train", seed=1)
    write_cm2(good, target)
    before = target.read_bytes()
    broken = generate_tasks(2, "train", seed=1)
    broken[1].checklists[0][0].weight = 5.0  # weights no longer sum to 1
    with pytest.raises(DataError, match=r"being written.*row 1"):
        write_cm2(broken, target)
    assert target.read_bytes() == before and os.listdir(tmp_path) == ["out.jsonl"]


def test_empty_and_unreadable_files(tmp_path):
    (tmp_path / "e.json").write_text("  \n")
    with pytest.raises(DataError, match="is empty"):
        load_cm2(tmp_path / "e.json")
    (tmp_path / "a.json").write_text('[{"uuid": "x",]')
    with pytest.raises(DataError, match="not valid JSON at line 1"):
        load_cm2(tmp_path / "a.json")
    with pytest.raises(DataError, match="cannot be read"):
        load_cm2(tmp_path / "missing.json")
    (tmp_path / "n.json").write_text(json.dumps([[1, 2]]))
    with pytest.raises(DataError, match=r"row 0: field '<row>': is a list"):
        load_cm2(tmp_path / "n.json")
