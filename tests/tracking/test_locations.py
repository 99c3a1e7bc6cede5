"""Where each kind of run logs (envace.tracking.locations), worked out by hand, and the rule that no other
module of envace/ or flows/ composes a run location itself."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from envace.tracking.locations import Kind, RunLocations, default_mlflow_files, locations, mlflow_dir

ROOT = Path(__file__).resolve().parents[2]


def test_each_kind_has_its_default_mlflow_folder_and_store(tmp_path):
    out = tmp_path / "runs" / "rl_x"
    expected_dir = {Kind.TRAIN: tmp_path / "runs" / "mlflow", Kind.EVAL: tmp_path / "runs" / "mlflow",
                    Kind.SWEEP: out / "mlflow", Kind.CLUSTER: out / "mlflow", Kind.PIPELINE: out / "mlflow",
                    Kind.FLOW: out / "mlflow", Kind.DEMO: out, Kind.WORLDBENCH: out}
    assert set(expected_dir) == set(Kind)
    for kind, folder in expected_dir.items():
        loc = locations(out, kind)
        assert loc == RunLocations(out_dir=out, mlflow_uri=f"sqlite:///{folder}/mlflow.db",
                                   store_url=f"{out}/store.db"), kind
        assert mlflow_dir(out, kind.value) == folder
    assert locations(out, "train").run_ids_file == out / "tracking_runs.json"


def test_explicit_locations_win_and_a_relative_folder_is_made_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    loc = locations("runs/x", Kind.EVAL, mlflow_uri="http://mlflow:5000", store_url="postgresql://db/s")
    assert (loc.out_dir, loc.mlflow_uri, loc.store_url) == (tmp_path / "runs" / "x", "http://mlflow:5000",
                                                            "postgresql://db/s")
    assert locations("runs/x", Kind.TRAIN).mlflow_uri == f"sqlite:///{tmp_path}/runs/mlflow/mlflow.db"
    assert default_mlflow_files("runs/x") == [tmp_path / "runs/x/mlflow/mlflow.db", tmp_path / "runs/mlflow/mlflow.db",
                                              tmp_path / "runs/x/mlflow.db"]
    with pytest.raises(ValueError, match="'nightly'"):
        locations("runs/x", "nightly")


def location_spellings(source: str) -> list[int]:
    """Lines that compose a run location: the names `store.db` / `mlflow.db`, or `<path> / "mlflow"`."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Constant) and node.value in ("store.db", "mlflow.db"):
            lines.append(node.lineno)
        elif isinstance(node, ast.JoinedStr) and any(
                isinstance(v, ast.Constant) and isinstance(v.value, str) and v.value.endswith(("mlflow.db", "store.db"))
                for v in node.values):
            lines.append(node.lineno)
        elif (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div) and isinstance(node.right, ast.Constant)
              and node.right.value in ("mlflow", "mlruns")):
            lines.append(node.lineno)
    return sorted(set(lines))


def test_the_detector_sees_each_spelling():
    src = ('a = f"sqlite:///{(out / \'mlflow.db\').resolve()}"\nb = str(out / "store.db")\n'
           'c = out / "mlflow"\nd = f"sqlite:///{root}/mlflow.db"\ne = "<out>/store.db is the default"\n')
    assert location_spellings(src) == [1, 2, 3, 4]


def test_no_module_but_locations_composes_a_run_location():
    found = {}
    for pkg in ("envace", "flows"):
        for path in sorted((ROOT / pkg).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel == "envace/tracking/locations.py":
                continue
            if lines := location_spellings(path.read_text(encoding="utf-8")):
                found[rel] = lines
    assert not found, f"run locations composed outside envace/tracking/locations.py: {found}"
