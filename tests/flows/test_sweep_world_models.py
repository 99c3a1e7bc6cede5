"""configs/sweeps/world_models.yaml at toy size end to end on Prefect's real engine: its own SFT start, its own
worldbench build (built-in world transitions), every arm trained one step and evaluated on the task and on
worldbench, and the task-gain vs world-model-gain table and the seed-level fidelity table written and checked
against the cells' own scores."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import yaml

from envace.sweeps.grid import slugify

pytestmark = [pytest.mark.flows, pytest.mark.usefixtures("pinned_code_version")]

REPO = Path(__file__).resolve().parents[2]
ARMS = ("envace", "grpo_env", "echo", "grounded", "per_role")


def toy_world_models(tmp_path: Path, toy_train: list[str], toy_eval: list[str], toy_sft: dict) -> Path:
    """The shipped sweep with toy sizes: arms, baselines, metrics and the worldbench section kept as shipped."""
    spec = yaml.safe_load((REPO / "configs/sweeps/world_models.yaml").read_text())
    spec["base"] = str(REPO / spec["base"])
    spec["sft"] = {"default": {"out": str(tmp_path / "sft"), **toy_sft}}
    spec["overrides"] = [*spec["overrides"], *toy_train, "dynamic_sampling.enabled=false"]
    spec["eval_overrides"] = list(toy_eval)
    spec["seeds"] = [0]
    spec["worldbench"]["build"] = {"sources": ["world"], "world_train": 2, "world_test": 2}
    spec["worldbench"]["score"] = ["limit=6", "max_new_tokens=16"]
    spec["worldbench"]["n_boot"] = 200
    spec.update(out_dir=str(tmp_path / "sweep"), mlflow_uri=f"sqlite:///{tmp_path / 'mlflow.db'}",
                store_url=str(tmp_path / "store.db"), max_workers=1)
    path = tmp_path / "world_models.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def test_world_models_sweep_writes_the_task_vs_world_model_table(prefect_harness, toy_train, toy_eval, toy_sft,
                                                                 tmp_path):
    from envace_flows.sweep import run_sweep_from_file

    summary = run_sweep_from_file(toy_world_models(tmp_path, toy_train, toy_eval, toy_sft))
    assert summary["failed"] == {}
    assert sorted(summary["executed"]) == sorted([f"variant={a},seed=0" for a in (*ARMS, "base")])
    assert summary["worldbench"]["cached"] is False
    table = pd.read_csv(Path(summary["out_dir"]) / "results" / "world_models.csv")
    assert set(table["arm"]) == {f"variant={a}" for a in ARMS} and set(table["base"]) == {"variant=base"}
    assert set(table["source"]) == {"all", "world"}
    assert (Path(summary["out_dir"]) / "results" / "world_models.md").read_text().startswith("| arm |")

    def cell(name: str) -> dict:
        return json.loads((Path(summary["out_dir"]) / "cells" / slugify(name) / "worldbench" /
                           "worldbench.json").read_text())

    # the seed-level fidelity table: with one seed, each arm's gain is its cell minus the base cell, no interval
    seeds = pd.read_csv(Path(summary["out_dir"]) / "results" / "world_model_seeds.csv")
    leaf = seeds[seeds["metric"] == "worldbench/all/leaf_f1"].set_index("arm")
    assert set(leaf.index) == {f"variant={a}" for a in ARMS} and set(leaf["n"]) == {1}
    base = cell("variant=base,seed=0")
    (base_row,) = base["rows"].values()
    assert base_row["n"] == 6  # limit=6 of the world test transitions, no reference rows
    for arm in ARMS:
        row = table[(table["arm"] == f"variant={arm}") & (table["source"] == "all")].iloc[0]
        (arm_row,) = cell(f"variant={arm},seed=0")["rows"].values()
        # one seed: the gain is the difference of the two cells' own mean scores, inside its interval
        for metric, key in (("leaf_f1", "leaf_f1"), ("exact", "exact")):
            want = arm_row["aggregate"]["all"][key] - base_row["aggregate"]["all"][key]
            assert row[f"wm_{metric}_gain"] == pytest.approx(want, abs=1e-9)
            assert row[f"wm_{metric}_lo"] - 1e-9 <= row[f"wm_{metric}_gain"] <= row[f"wm_{metric}_hi"] + 1e-9
        assert leaf.at[f"variant={arm}", "diff"] == pytest.approx(row["wm_leaf_f1_gain"], abs=1e-9)
        assert row["transitions"] == 6 and row["tasks"] == 2
        assert row["task_success_lo"] - 1e-9 <= row["task_success_gain"] <= row["task_success_hi"] + 1e-9
    per_role = cell("variant=per_role,seed=0")["config"]
    assert per_role["model"]["model_dir"].endswith("/rehearse")  # the per-role arm's world model
    assert json.loads((Path(per_role["data"]) / "manifest.json").read_text())["config"]["sources"] == ["world"]
    records = {c["cell"]: c for c in pd.read_csv(Path(summary["out_dir"]) / "results" / "cells.csv").to_dict(
        "records")}
    assert "worldbench/all/leaf_f1" in records["variant=echo,seed=0"]
