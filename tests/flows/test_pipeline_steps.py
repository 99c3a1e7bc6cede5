"""envace.pipeline, the one pipeline definition: params.yaml sections become the step configs DVC runs, and
`python -m envace.pipeline STEP` runs every dvc.yaml stage at toy sizes into the repository layout."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from envace.pipeline import Layout, as_overrides, main, rl_config, sft_config

REPO = Path(__file__).resolve().parents[2]


def test_as_overrides_hand_worked():
    section = {"steps": 3, "progress": False, "lr": 0.002, "config": "x.yaml", "rollout": {"act": {"top_p": 0.5}}}
    assert as_overrides(section, skip=("config",)) == ["steps=3", "progress=false", "lr=0.002",
                                                        "rollout.act.top_p=0.5"]


def test_params_yaml_sections_become_step_configs(tmp_path):
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    layout = Layout.repo(tmp_path)
    sft = sft_config(layout, as_overrides(params["sft"]))
    assert (sft.steps, sft.batch_size, sft.lr, sft.seed) == tuple(params["sft"][k] for k in ("steps", "batch_size",
                                                                                              "lr", "seed"))
    assert (sft.model, sft.out_dir) == (str(tmp_path / "models/tiny"), str(tmp_path / "runs/sft"))
    assert (sft.data.source, sft.data.path) == ("cm2", str(tmp_path / "data/world/train.json"))
    rl = params["rl"]
    cfg = rl_config(layout, REPO / rl["config"], as_overrides(rl, skip=("config",)))
    assert (cfg.steps, cfg.prompts_per_step, cfg.k, cfg.seed) == (rl["steps"], rl["prompts_per_step"], rl["k"],
                                                                  rl["seed"])
    from_yaml = yaml.safe_load((REPO / rl["config"]).read_text())
    assert cfg.rollout.mode == from_yaml["rollout"]["mode"] == "rehearse"  # the YAML's recipe is kept
    assert (cfg.model, cfg.out_dir) == (str(tmp_path / "runs/sft/model"), str(tmp_path / "runs/rl"))
    assert (cfg.data.source, cfg.data.path) == ("cm2", str(tmp_path / "data/world/train.json"))


def test_every_dvc_stage_at_toy_sizes(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the trainer's default MLflow / store paths land here
    params = {
        "data": {"n_train": 6, "n_val": 1, "n_test": 2, "seed": 0},
        "model": {"corpus_tasks": 30, "hidden_size": 32, "num_layers": 1, "num_heads": 2, "num_kv_heads": 1,
                  "head_dim": 16, "intermediate_size": 64, "vocab_size": 400, "seed": 0},
        "sft": {"steps": 2, "batch_size": 2, "threads": 1, "seed": 0},
        "rl": {"config": str(REPO / "configs/train/envace.yaml"), "steps": 1, "prompts_per_step": 1, "k": 2,
               "save_every": 1, "seed": 0, "threads": 1, "data": {"n_tasks": 6},
               "rollout": {"max_assistant_turns": 2, "act": {"max_new_tokens": 16},
                           "rehearse": {"max_new_tokens": 16}}},
        "eval": {"n_tasks": 2, "k": 1, "fidelity": False, "threads": 1, "rollout": {"max_assistant_turns": 2}},
    }
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    run = lambda step: main([step, "--params", str(tmp_path / "params.yaml"), "--root", str(tmp_path)])  # noqa: E731
    lay = Layout.repo(tmp_path)
    assert run("data") == 0
    assert [len(json.loads((lay.data / f"{s}.json").read_text())) for s in ("train", "val", "test")] == [6, 1, 2]
    assert run("model") == 0 and json.loads((lay.model / "config.json").read_text())["hidden_size"] == 32
    assert run("sft") == 0 and (lay.sft_model / "config.json").is_file()
    stale = lay.rl / "checkpoints" / "step_9"  # a previous run's checkpoint: the stage must not resume from it
    stale.mkdir(parents=True)
    assert run("rl") == 0
    ckpts = list((lay.rl / "checkpoints").iterdir())
    assert not stale.exists() and len(ckpts) == 1 and int(ckpts[0].name.removeprefix("step_")) == 1
    assert sorted(p.name for p in lay.rl_final.iterdir()) == sorted(p.name for p in ckpts[0].iterdir())
    assert run("evaluate") == 0
    assert json.loads((lay.eval / "eval.json").read_text())["world"]["tasks"] == 2
