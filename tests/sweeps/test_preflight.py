"""A sweep is checked before any cell runs: its cell count, computed without expanding the grid, equals the
count of the expanded grid (a slow, obviously correct expansion on seeded random grids with exclusions and
baselines); a grid over the cell budget is refused without being expanded; every cell's configs are
validated, and the first bad cell is named with how many others are bad; `envace sweep run --dry-run`
prints the validated cells and creates nothing."""

from __future__ import annotations

import json
import random
import resource

import pytest
import yaml
from typer.testing import CliRunner

from envace.config import ConfigError
from envace.sweeps import grid as grid_mod
from envace.sweeps.grid import SweepConfig, expand_cells
from envace.sweeps.preflight import cell_count, preflight
from envace.sweeps.prepare import SFTSpec

TRAIN = ["model=/models/tiny", "steps=1"]


def _random_sweep(rng: random.Random, tmp_path) -> SweepConfig:
    axes: dict = {}
    for a in range(rng.randint(0, 3)):
        n = rng.randint(1, 4)
        axes[f"ax{a}"] = {f"l{i}": [f"seed={i}"] for i in range(n)} if rng.random() < 0.5 else list(range(n))
    exclude = []
    for _ in range(rng.randint(0, 4) if axes else 0):
        picked = rng.sample(list(axes), rng.randint(1, len(axes)))
        exclude.append({a: rng.choice([n for n, _ in grid_mod.axis_levels(a, axes[a])]) for a in picked})
    seeds = rng.sample(range(10), rng.randint(1, 3))
    extra = {}
    if axes and rng.random() < 0.3:
        extra = {"sft": {"s": SFTSpec(out=str(tmp_path / "sft"))}, "baselines": {"base": "s"}, "eval_overrides": []}
    return SweepConfig(name="r", overrides=TRAIN, axes=axes, exclude=exclude, seeds=seeds,
                       out_dir=str(tmp_path / "sw"), **extra)


def test_the_count_without_expanding_equals_the_expanded_grid(tmp_path):
    rng = random.Random(0)
    checked = 0
    for _ in range(300):
        cfg = _random_sweep(rng, tmp_path)
        try:
            cells = expand_cells(cfg)
        except ConfigError:  # every combination excluded
            assert cell_count(cfg) == len(cfg.baselines) * len(cfg.seeds)
            continue
        assert cell_count(cfg) == len(cells), cfg
        checked += 1
    assert checked > 200


def test_a_million_cell_grid_is_refused_without_being_expanded(tmp_path, monkeypatch):
    cfg = SweepConfig(name="huge", overrides=TRAIN, axes={"a": list(range(100)), "b": list(range(100)),
                                                          "c": list(range(100))}, out_dir=str(tmp_path / "sw"))

    def no_expansion(*args, **kwargs):
        raise AssertionError("the grid was expanded")

    monkeypatch.setattr(grid_mod.itertools, "product", no_expansion)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(ConfigError) as err:
        preflight(cfg)
    msg = str(err.value)
    assert "sweep 'huge': the grid (axes x seeds) is 1000000 cells, over the limit of 1000" in msg, msg
    assert "ENVACE_MAX_SWEEP_CELLS" in msg and "\n" not in msg
    assert (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024 < 100
    monkeypatch.undo()  # expansion allowed again: the setting moves the limit
    monkeypatch.setenv("ENVACE_MAX_SWEEP_CELLS", "8")
    small = SweepConfig(name="s", overrides=TRAIN, axes={"steps": [1, 2, 3]}, seeds=[0, 1, 2], out_dir=str(tmp_path))
    with pytest.raises(ConfigError, match="is 9 cells, over the limit of 8"):
        preflight(small)
    monkeypatch.setenv("ENVACE_MAX_SWEEP_CELLS", "9")
    assert len(preflight(small)) == 9


def test_every_cells_config_is_validated_and_the_first_bad_one_named(tmp_path):
    cfg = SweepConfig(name="arms", overrides=TRAIN, out_dir=str(tmp_path / "sw"), seeds=[0, 1],
                      axes={"variant": {"envace": [], "grpo": ["rollout.mdoe=env"], "kl": ["algo.use_kl=maybe"]}})
    with pytest.raises(ConfigError) as err:
        preflight(cfg)
    msg = str(err.value)
    assert "cell 'variant=grpo,seed=0'" in msg and "rollout.mdoe" in msg, msg
    assert "3 more of the 6 cells have a problem" in msg and "\n" not in msg
    assert not (tmp_path / "sw").exists()  # nothing written


@pytest.mark.parametrize(("field", "value", "needle"), [
    ("eval_overrides", ["n_tasks=zero"], "n_tasks"),
    ("worldbench", {"score": ["limit=-1"]}, "limit"),
])
def test_a_training_cells_later_stages_are_validated_too(tmp_path, field, value, needle):
    cfg = SweepConfig(name="stages", overrides=TRAIN, out_dir=str(tmp_path / "sw"), axes={"v": {"a": []}},
                      **{field: value})
    with pytest.raises(ConfigError, match=needle):
        preflight(cfg)


def _write(tmp_path, spec: dict):
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump({"name": "dry", "overrides": TRAIN, "out_dir": str(tmp_path / "sw"), **spec}))
    return path


def test_dry_run_prints_the_cells_and_runs_nothing(tmp_path):
    from envace.cli import app

    path = _write(tmp_path, {"axes": {"variant": {"envace": [], "kl_on": ["algo.use_kl=true"]}}, "seeds": [0, 1]})
    res = CliRunner().invoke(app, ["sweep", "run", "--dry-run", str(path)])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert out["n_cells"] == 4 and [c["name"] for c in out["cells"]] == [
        "variant=envace,seed=0", "variant=envace,seed=1", "variant=kl_on,seed=0", "variant=kl_on,seed=1"]
    assert out["cells"][3]["overrides"] == [*TRAIN, "algo.use_kl=true", "seed=1"]
    assert not (tmp_path / "sw").exists()


def test_dry_run_of_a_bad_sweep_is_one_line(tmp_path, capsys):
    from envace.cli import app

    path = _write(tmp_path, {"axes": {"variant": {"envace": [], "typo": ["algo.use_kll=true"]}}})
    with pytest.raises(SystemExit) as code:
        app(["sweep", "run", "--dry-run", str(path)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code.value.code == 2 and len(err) == 1 and "cell 'variant=typo,seed=0'" in err[0], err
    assert "algo.use_kll" in err[0]
