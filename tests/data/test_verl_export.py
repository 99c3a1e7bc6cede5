"""`envace data export`: CM2 items (a JSON array or JSON lines) become the verl parquet a verl launch config
names, one row per item, with envace's agent loop name and the item's tool schemas; bad input fails with
one line and leaves no file."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from envace.cli import app
from envace.data import DataError, load_cm2, read_verl_parquet
from envace.data.verl_export import AGENT_NAME, export_verl

FIX = Path(__file__).parent / "fixtures"


def _as_jsonl(src: Path, dest: Path) -> Path:
    dest.write_text("\n".join(json.dumps(item) for item in json.loads(src.read_text())) + "\n")
    return dest


@pytest.mark.parametrize("form", ["json", "jsonl"])
def test_cm2_items_become_verl_rows(tmp_path, form):
    src = FIX / "cm2_good.json" if form == "json" else _as_jsonl(FIX / "cm2_good.json", tmp_path / "cm2.jsonl")
    items = json.loads((FIX / "cm2_good.json").read_text())
    out = export_verl(src, tmp_path / "train.parquet")
    assert out["rows"] == len(items) == 3 and out["agent_name"] == "envace_agent"
    assert out["tools"] == sorted({t["function"]["name"] for item in items for t in item["tools"]})
    rows = pq.read_table(tmp_path / "train.parquet").to_pylist()
    for row, item in zip(rows, items, strict=True):
        assert row["agent_name"] == "envace_agent" and row["data_source"] == "cm2"
        assert json.loads(row["extra_info"]["tools"]) == item["tools"]  # the item's schemas, unchanged
        assert row["extra_info"]["uuid"] == item["uuid"]
        first_user = next(i for i, m in enumerate(item["messages"]) if m["role"] == "user")
        assert [m["role"] for m in row["prompt"]] == [m["role"] for m in item["messages"][: first_user + 1]]
        assert row["prompt"][-1]["content"] == item["messages"][first_user]["content"]
    # both backends read the same tasks back
    assert [t.uuid for t in read_verl_parquet(tmp_path / "train.parquet")] == [t.uuid for t in load_cm2(src)]


def test_the_agent_name_is_the_one_the_verl_loop_registers():
    from envace.trainers.verl.dataset import AGENT_NAME as LOOP_NAME

    assert AGENT_NAME == LOOP_NAME == "envace_agent"


def test_bad_input_fails_and_writes_nothing(tmp_path):
    dest = tmp_path / "out.parquet"
    with pytest.raises(DataError, match="question"):
        export_verl(FIX / "bad_item.json", dest)
    with pytest.raises(DataError, match="does not end in .parquet"):
        export_verl(FIX / "cm2_good.json", tmp_path / "out.json")
    assert list(tmp_path.iterdir()) == []


def test_the_command(tmp_path):
    dest = tmp_path / "val.parquet"
    res = CliRunner().invoke(app, ["data", "export", str(FIX / "cm2_good.json"), str(dest),
                                   "--data-source", "cm2_val"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["rows"] == 3
    assert pq.read_table(dest).column("data_source").to_pylist() == ["cm2_val"] * 3
    bad = CliRunner().invoke(app, ["data", "export", str(FIX / "bad_item.json"), str(tmp_path / "x.parquet")])
    assert isinstance(bad.exception, DataError) and not (tmp_path / "x.parquet").exists()
