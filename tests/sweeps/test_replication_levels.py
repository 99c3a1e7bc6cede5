"""A sweep's replication levels and evaluation passes: SFT starts above RL seeds (`sft_seeds`), named extra
evaluation passes (`extra_evals`) and explicit contrasts, as the grid expands and a cell runs them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from envace.config import ConfigError
from envace.sweeps.cells import cell_cache_key, run_cell
from envace.sweeps.grid import SweepConfig, expand_cells


def _sweep(tmp_path, **kw) -> SweepConfig:
    base = dict(name="s", kind="train", base="configs/train/envace.yaml", out_dir=str(tmp_path / "sw"),
                sft={"default": {"out": str(tmp_path / "sft")}}, overrides=["model={sft:default}"],
                axes={"variant": {"envace": [], "grpo_env": ["rollout.mode=env"]}}, baselines={"base": "default"},
                seeds=[0, 1], eval_overrides=["n_tasks=5", "k=1"])
    base.update(kw)
    return SweepConfig.model_validate(base)


def test_sft_seeds_put_every_cell_and_base_row_under_each_start(tmp_path):
    cfg = _sweep(tmp_path, sft_seeds=[3, 7])
    cells = expand_cells(cfg)
    # 2 starts x (1 base row + 2 arms) x 2 seeds
    assert len(cells) == 12
    assert {c.sft_seed for c in cells} == {3, 7}
    for c in cells:
        model = next(o for o in c.overrides if o.startswith("model="))
        assert model == f"model={tmp_path / 'sft' / f'seed_{c.sft_seed}' / 'model'}"
        assert f"sft_seed={c.sft_seed},seed={c.seed}" in c.name and "sft_seed" not in c.group
    assert len({c.out_dir for c in cells}) == 12
    builds = cfg.sft_builds()
    assert sorted(builds) == ["default@3", "default@7"]
    assert builds["default@7"].seed == 7 and builds["default@7"].out == str(tmp_path / "sft" / "seed_7")


def test_without_sft_seeds_the_cells_are_those_of_one_start(tmp_path):
    cells = expand_cells(_sweep(tmp_path))
    assert [c.name for c in cells] == ["variant=base,seed=0", "variant=base,seed=1", "variant=envace,seed=0",
                                       "variant=envace,seed=1", "variant=grpo_env,seed=0", "variant=grpo_env,seed=1"]
    assert all(c.sft_seed is None for c in cells)
    assert _sweep(tmp_path).sft_builds() == _sweep(tmp_path).sft


def test_contrasts_name_grid_points_or_first_axis_levels(tmp_path):
    cfg = _sweep(tmp_path, contrasts=[["grpo_env", "envace"], ["variant=envace", "base"]])
    assert cfg.contrast_groups() == [("variant=grpo_env", "variant=envace"), ("variant=envace", "variant=base")]
    with pytest.raises(ValueError, match="contrast .* names 'per_role', which is no grid point"):
        _sweep(tmp_path, contrasts=[["per_role", "envace"]])


def test_an_exclude_with_seeds_runs_a_probe_arm_on_fewer_seeds(tmp_path):
    cfg = _sweep(tmp_path, seeds=[0, 1, 2], exclude=[{"variant": "grpo_env", "seeds": [1, 2]}])
    names = [c.name for c in expand_cells(cfg) if c.group == "variant=grpo_env"]
    assert names == ["variant=grpo_env,seed=0"]
    assert len([c for c in expand_cells(cfg) if c.group == "variant=envace"]) == 3


@pytest.mark.parametrize(("extra", "message"), [
    ({"exclude": [{"seeds": [1]}]}, "`seeds` is a list of seeds beside at least one axis level"),
    ({"exclude": [{"variant": "envace", "seeds": 1}]}, "`seeds` is a list of seeds"),
    ({"sft_seeds": [1, 1]}, "sft_seeds .* each once"),
    ({"sft_seeds": [1], "sft": {}, "baselines": {}, "overrides": []}, "sft_seeds is set but `sft:` names no"),
    ({"extra_evals": {"t1": ["k"]}}, "extra_evals.t1: override 'k' is not key=value"),
    ({"extra_evals": {"default": ["k=4"]}}, "must be a plain slug other than 'default'"),
    ({"extra_evals": {"t 1": ["k=4"]}}, "must be a plain slug"),
    ({"extra_evals": {"t1": ["k=4"]}, "eval_overrides": None, "baselines": {}}, "extra_evals.t1 needs eval_overrides"),
])
def test_replication_config_errors_name_the_fix(tmp_path, extra, message):
    with pytest.raises((ValueError, ConfigError), match=message):
        _sweep(tmp_path, **extra)


def test_extra_passes_enter_the_cache_key_only_when_set(tmp_path):
    plain = expand_cells(_sweep(tmp_path))[0]
    assert "extra_evals" not in plain.model_dump(exclude_defaults=True)
    with_pass = plain.model_copy(update={"extra_evals": {"t1_k2": ["k=2"]}})
    other = plain.model_copy(update={"extra_evals": {"t1_k2": ["k=3"]}})
    model = next(o for o in plain.overrides if o.startswith("model=")).split("=", 1)[1]
    Path(model).mkdir(parents=True)  # the model dir the key hashes
    keys = {cell_cache_key(c) for c in (plain, with_pass, other)}
    assert len(keys) == 3


def test_an_eval_cell_runs_each_pass_and_records_its_file(tiny_dir, tmp_path):
    cfg = SweepConfig.model_validate(dict(
        name="p", kind="eval", out_dir=str(tmp_path / "sw"), overrides=[f"model={tiny_dir}", "n_tasks=3", "k=1",
                                                                         "fidelity=false", "threads=1",
                                                                         "progress=false"],
        axes={"variant": {"only": []}}, seeds=[5], eval_overrides=[],
        extra_evals={"t1_k2": ["rollout.act.temperature=1.0", "k=2"]}))
    (cell,) = expand_cells(cfg)
    record = run_cell(cell)
    files = record["eval_files"]
    assert sorted(files) == ["default", "t1_k2"] and files["default"] == record["eval_file"]
    main = json.loads(Path(files["default"]).read_text())["world"]
    extra = json.loads(Path(files["t1_k2"]).read_text())["world"]
    assert main["per_task"]["k"] == 1 and main["temperature"] == 0.0
    assert extra["per_task"]["k"] == 2 and extra["temperature"] == 1.0
    assert main["per_task"]["seeds"] == extra["per_task"]["seeds"] == [5]  # the cell's seed, both passes
    assert len(extra["per_task"]["success"]) == 3 and len(extra["per_task"]["success"][0]) == 2
    assert record["metrics"]["eval_t1_k2/world/success"] == pytest.approx(
        sum(map(sum, extra["per_task"]["success"])) / 6)
