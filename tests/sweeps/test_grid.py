"""Sweep grids: product of axes × seeds, override order, excludes, validation errors, shipped configs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from envace.config import ConfigError, load_config
from envace.sweeps.cells import resolve_cell_config
from envace.sweeps.grid import SweepConfig, expand_cells, slugify, tts_sweep_config

REPO = Path(__file__).resolve().parents[2]


def make(**kw) -> SweepConfig:
    return SweepConfig(**{"name": "s", "out_dir": "/tmp/s", **kw})


def test_product_of_axes_times_seeds_with_overrides_in_order():
    cfg = make(overrides=["steps=3"], seeds=[0, 1],
               axes={"variant": {"a": ["k=1"], "b": ["k=2", "j=5"]}, "algo.use_kl": [True, False]})
    cells = expand_cells(cfg, parent_run_id="P")
    assert len(cells) == 2 * 2 * 2
    assert [c.name for c in cells[:4]] == ["variant=a,algo.use_kl=true,seed=0", "variant=a,algo.use_kl=true,seed=1",
                                           "variant=a,algo.use_kl=false,seed=0", "variant=a,algo.use_kl=false,seed=1"]
    c = next(c for c in cells if c.name == "variant=b,algo.use_kl=false,seed=1")
    assert c.group == "variant=b,algo.use_kl=false"
    assert c.levels == {"variant": "b", "algo.use_kl": "false"}
    assert c.all_overrides() == ["steps=3", "k=2", "j=5", "algo.use_kl=false", "seed=1"]  # seed last: it wins
    assert c.parent_run_id == "P" and c.out_dir == "/tmp/s/cells/" + slugify(c.name)
    assert len({x.out_dir for x in cells}) == len(cells)


def test_eval_cells_put_the_seed_in_the_seed_list():
    cells = expand_cells(make(kind="eval", axes={"tts.n": [2]}, seeds=[7]))
    assert cells[0].all_overrides() == ["tts.n=2", "seeds=[7]"]


def test_no_axes_gives_one_cell_per_seed():
    cells = expand_cells(make(seeds=[3, 4]))
    assert [c.name for c in cells] == ["seed=3", "seed=4"] and {c.group for c in cells} == {"all"}


def test_exclude_drops_combinations():
    cfg = tts_sweep_config("m", "/tmp/t", n_values=[0, 1, 2], modes=["parallel", "sequential"], seeds=[0, 1])
    groups = list(dict.fromkeys(c.group for c in expand_cells(cfg)))
    assert groups == ["tts.n=0,tts.mode=parallel", "tts.n=1,tts.mode=parallel", "tts.n=1,tts.mode=sequential",
                      "tts.n=2,tts.mode=parallel", "tts.n=2,tts.mode=sequential"]
    assert cfg.artifact_dir == "tts" and cfg.kind == "eval"


def test_a_memory_axis_runs_the_plain_run_once():
    cfg = tts_sweep_config("m", "/tmp/t", n_values=[0, 1], modes=["parallel"], memories=["prose", "best_of_n"])
    groups = list(dict.fromkeys(c.group for c in expand_cells(cfg)))
    assert groups == ["tts.n=0,tts.mode=parallel,tts.memory=prose", "tts.n=1,tts.mode=parallel,tts.memory=prose",
                      "tts.n=1,tts.mode=parallel,tts.memory=best_of_n"]
    cell = next(c for c in expand_cells(cfg) if c.group.endswith("best_of_n"))
    assert cell.all_overrides()[-3:] == ["tts.mode=parallel", "tts.memory=best_of_n", "seeds=[0]"]


@pytest.mark.parametrize("kw, needle", [
    ({"overrides": ["steps"]}, "override 'steps' is not key=value"),
    ({"seeds": [0, 0]}, "repeat"),
    ({"axes": {"v": {}}}, "axis 'v' has no levels"),
    ({"axes": {"v": {"a": ["oops"]}}}, "level 'a': override 'oops'"),
    ({"axes": {"v": {"a": []}}, "exclude": [{"w": "a"}]}, "exclude names axis 'w'"),
    ({"axes": {"v": {"a": []}}, "exclude": [{"v": "zzz"}]}, "exclude names level 'zzz'"),
])
def test_invalid_sweeps_name_the_problem(kw, needle, tmp_path):
    with pytest.raises(ValueError, match=needle):  # constructed directly: pydantic wraps the ConfigError
        make(**kw)
    import yaml

    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({"name": "s", "out_dir": "/tmp/s", **kw}))
    with pytest.raises(ConfigError, match=needle):  # loaded from a file: the plain explained error
        load_config(SweepConfig, path)


def test_all_excluded_and_colliding_dirs_are_errors():
    with pytest.raises(ConfigError, match="every combination is excluded"):
        expand_cells(make(axes={"v": {"a": []}}, exclude=[{"v": "a"}]))
    with pytest.raises(ConfigError, match="same directory"):
        expand_cells(make(axes={"v": {"a b": [], "a-b": []}}))


@pytest.mark.parametrize("name, n_cells", [("paper_ablations", 36), ("tts", 42), ("example_two_cell", 2),
                                                  ("world_models", 18), ("world_model_knobs", 24)])
def test_shipped_sweeps_expand_and_every_cell_config_validates(name, n_cells):
    cfg = load_config(SweepConfig, REPO / "configs" / "sweeps" / f"{name}.yaml")
    cells = expand_cells(cfg)
    assert len(cells) == n_cells
    for cell in cells:
        resolved = resolve_cell_config(cell)  # raises ConfigError on any invalid cell
        assert resolved.out_dir == cell.out_dir


def test_world_models_train_every_arm_from_one_start_and_score_every_cell_on_worldbench():
    cfg = load_config(SweepConfig, REPO / "configs/sweeps/world_models.yaml")
    cells = expand_cells(cfg)
    by_group = {c.group: resolve_cell_config(c) for c in cells if c.seed == 0}
    assert cfg.seeds == [0, 1, 2] and cfg.worldbench is not None
    trained = {g: c for g, c in by_group.items() if g != "variant=base"}
    assert set(trained) == {f"variant={v}" for v in ("envace", "grpo_env", "echo", "grounded", "per_role")}
    assert len({c.model for c in trained.values()}) == 1  # one SFT start
    assert len({(c.steps, c.prompts_per_step, c.k, c.optim.lr) for c in trained.values()}) == 1  # one budget
    assert trained["variant=echo"].rollout.mode == "env" and trained["variant=echo"].algo.echo_coef > 0
    assert trained["variant=grounded"].rollout.mode == "rehearse" and trained["variant=grounded"].grounded.fraction > 0
    assert trained["variant=grpo_env"].algo.echo_coef == 0 and trained["variant=envace"].grounded.fraction == 0
    assert trained["variant=per_role"].policy == "per_role"
    data = {c.worldbench_data for c in cells}
    assert data == {str(cfg.worldbench.data_dir(cfg.out_dir))}  # every cell, base rows too, on one build
    assert {c.kind for c in cells if c.group == "variant=base"} == {"eval"}


def test_paper_ablations_cover_the_papers_switches():
    cfg = load_config(SweepConfig, REPO / "configs/sweeps/paper_ablations.yaml")
    by_group = {c.group: resolve_cell_config(c) for c in expand_cells(cfg) if c.seed == 0}
    assert cfg.seeds == [0, 1, 2]
    assert by_group["variant=envace"].rollout.mode == "rehearse" and by_group["variant=envace"].policy == "shared"
    assert by_group["variant=grpo_env"].rollout.mode == "env"
    assert by_group["variant=per_role"].policy == "per_role"
    assert by_group["variant=act_only_sim"].rollout.mode == "simulator"
    assert by_group["variant=kl_on"].algo.use_kl is True and by_group["variant=envace"].algo.use_kl is False
    assert by_group["variant=rehearse_t0.01"].rollout.rehearse.temperature == 0.01
    assert by_group["variant=envace"].rollout.rehearse.temperature == 1.0
    assert by_group["variant=envace_clip_per_role"].optim.grad_clip_per_role is True
    assert by_group["variant=envace"].optim.grad_clip_per_role is False
    assert cfg.sft["errors"].error_demos > 0 and cfg.sft["default"].error_demos == 0
    assert by_group["variant=envace_error_demos"].model == str(cfg.sft["errors"].model_dir())
    # one rollout contract: every cell (9 trained arms, 3 base rows) ends its episodes by the same rules
    rules = {g: c.rollout.rule_values() for g, c in by_group.items()}
    assert len(rules) == 12 and len({tuple(sorted(r.items())) for r in rules.values()}) == 1


def test_fair_arms_are_paper_ablations_arms_with_one_contract():
    """The fair-arms grid is six of paper_ablations' arms, cell for cell the same training and evaluation
    configs (only their output and tracking places differ), all under one set of episode rules."""
    fair = load_config(SweepConfig, REPO / "configs/sweeps/fair_arms.yaml")
    paper = load_config(SweepConfig, REPO / "configs/sweeps/paper_ablations.yaml")
    assert fair.seeds == [0, 1, 2]

    def comparable(cfg):
        out = {}
        for c in expand_cells(cfg):
            if c.seed != 0:
                continue
            d = resolve_cell_config(c, for_key=True).model_dump(mode="json")
            for k in ("out_dir", "tracking"):
                d.pop(k, None)
            out[c.group] = json.dumps(d, sort_keys=True).replace("fair_arms", "SWEEP").replace("paper_ablations",
                                                                                              "SWEEP")
        return out

    f, p = comparable(fair), comparable(paper)
    assert set(f) == {f"variant={v}" for v in ("base", "base_errors", "envace", "grpo_env", "per_role",
                                                "act_only_sim", "rehearse_t0.01", "envace_error_demos")}
    assert {g: f[g] == p[g] for g in f} == dict.fromkeys(f, True)
    rules = {g: c.rollout.rule_values() for g, c in ((c.group, resolve_cell_config(c)) for c in expand_cells(fair))}
    assert len({tuple(sorted(r.items())) for r in rules.values()}) == 1
    assert {n: s.model_dump(exclude={"out"}) for n, s in fair.sft.items()} == \
        {n: paper.sft[n].model_dump(exclude={"out"}) for n in fair.sft}


def test_paper_ablations_build_their_sft_and_evaluate_base_rows():
    cfg = load_config(SweepConfig, REPO / "configs/sweeps/paper_ablations.yaml")
    cells = expand_cells(cfg)
    default, small = (str(cfg.sft[n].model_dir()) for n in ("default", "small"))
    by_group = {c.group: c for c in cells if c.seed == 0}
    assert resolve_cell_config(by_group["variant=envace"]).model == default
    assert resolve_cell_config(by_group["variant=envace_small"]).model == small
    assert resolve_cell_config(by_group["variant=act_only_sim"]).rollout.simulator_model == default
    base = by_group["variant=base"]
    assert base.kind == "eval" and base.levels == {"variant": "base"}
    ecfg = resolve_cell_config(base)
    assert ecfg.model == default and ecfg.split == "test" and ecfg.seeds == [0]
    assert resolve_cell_config(by_group["variant=base_small"]).model == small
    assert cfg.sft["small"].tiny["hidden_size"] < 128  # two model sizes


def test_sft_refs_and_baselines_are_validated():
    sft = {"a": {"out": "/tmp/sft_a"}}
    cells = expand_cells(make(sft=sft, overrides=["model={sft:a}"], axes={"v": {"x": []}}, seeds=[0, 1],
                              baselines={"base": "a"}, eval_overrides=["n_tasks=2"]))
    assert [c.name for c in cells] == ["v=base,seed=0", "v=base,seed=1", "v=x,seed=0", "v=x,seed=1"]
    assert cells[0].all_overrides() == ["n_tasks=2", "model=/tmp/sft_a/model", "seeds=[0]"]
    assert cells[2].all_overrides() == ["model=/tmp/sft_a/model", "seed=0"]
    with pytest.raises(ValueError, match=r"\{sft:b\}"):
        make(sft=sft, overrides=["model={sft:b}"])
    # worldbench scoring names the start model the same way (BehR's frozen Act): resolved per start, checked
    wb = {"score": ["limit=5", "act_checkpoint={sft:a}", "behr=true"]}
    cells = expand_cells(make(sft=sft, axes={"v": {"x": []}}, seeds=[0], worldbench=wb))
    assert cells[0].worldbench_score == ["limit=5", "act_checkpoint=/tmp/sft_a/model", "behr=true"]
    with pytest.raises(ValueError, match=r"\{sft:b\}"):
        make(sft=sft, worldbench={"score": ["act_checkpoint={sft:b}"]})
    with pytest.raises(ValueError, match="baselines.base names SFT checkpoint 'zz'"):
        make(sft=sft, axes={"v": {"x": []}}, baselines={"base": "zz"}, eval_overrides=["n_tasks=2"])
    with pytest.raises(ValueError, match="need eval_overrides"):
        make(sft=sft, axes={"v": {"x": []}}, baselines={"base": "a"})
