"""The one pipeline definition: tool-world data → tiny model → SFT cold start → RL → evaluation.

One function per step. `envace demo` (envace/demo.py), the Prefect flow (flows/pipeline.py) and the DVC
stages (dvc.yaml runs `python -m envace.pipeline STEP`, configured by params.yaml) all call them, so a
change to how a step is configured or what it writes is made here once. `Layout` names each step's
output; the flow roots it at its `out_dir`, DVC at the repository (`Layout.repo()`), the demo at its `out`.

Where the demo departs: it trains SFT and RL on generated tasks (`DataConfig` seeds) rather than the
exported CM2 files, trains two RL methods from one SFT model, and scores models with the paired
per-task evaluation (envace.evaluation.paired) instead of `evaluate` below.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envace.config import load_config

STEPS = ("data", "model", "sft", "rl", "evaluate")


@dataclass(frozen=True)
class Layout:
    """Where each step writes (and the next one reads)."""

    data: Path
    model: Path
    sft: Path
    rl: Path
    eval: Path

    @classmethod
    def under(cls, root: str | Path) -> Layout:
        """Everything under one directory (the flow's `out_dir`)."""
        r = Path(root)
        return cls(r / "data", r / "models" / "tiny", r / "sft", r / "rl", r / "eval")

    @classmethod
    def repo(cls, root: str | Path = ".") -> Layout:
        """dvc.yaml's outputs, relative to the repository root."""
        r = Path(root)
        return cls(r / "data" / "world", r / "models" / "tiny", r / "runs" / "sft", r / "runs" / "rl",
                   r / "runs" / "eval")

    @property
    def train_json(self) -> Path:
        return self.data / "train.json"

    @property
    def test_json(self) -> Path:
        return self.data / "test.json"

    @property
    def sft_model(self) -> Path:
        return self.sft / "model"

    @property
    def rl_final(self) -> Path:
        """A stable copy of the last RL checkpoint (step_* names change with the step count)."""
        return self.rl / "final"


def build_data(out: str | Path, counts: dict[str, int], seed: int) -> dict[str, Any]:
    """Tool-world splits as CM2 JSON and verl parquet; returns each split's paths and counts."""
    from envace.data.export import export_world

    if not {"train", "test"} <= set(counts):
        raise ValueError(f"counts {counts} needs a 'train' and a 'test' split, e.g. {{'train': 400, 'test': 50}}")
    return export_world(out, counts, seed)


def build_model(out: str | Path, corpus_tasks: int, cfg: Any = None) -> Path:
    """The tiny Qwen3-architecture model and its BPE tokenizer, trained on `corpus_tasks` world tasks."""
    from envace.models.corpus import world_corpus
    from envace.models.tiny import TinyModelConfig, init_tiny_model

    cfg = cfg or TinyModelConfig()
    return Path(init_tiny_model(world_corpus(corpus_tasks, seed=cfg.seed), out, cfg))


def model_config(overrides: list[str]) -> Any:
    from envace.models.tiny import TinyModelConfig

    return load_config(TinyModelConfig, None, overrides)


def sft_config(layout: Layout, overrides: list[str]) -> Any:
    """SFT of the layout's tiny model on its exported train split."""
    from envace.trainers.config import SFTConfig

    return load_config(SFTConfig, None, ["data.source=cm2", f"data.path={layout.train_json}", *overrides],
                       model=str(layout.model), out_dir=str(layout.sft))


def run_sft(cfg: Any, per_task: Any = None) -> dict[str, Any]:
    """Train `<out_dir>/model`; returns the SFT summary plus its wall time (`per_task`: see
    envace.trainers.sft.sft)."""
    from envace.trainers.sft import sft

    t0 = time.perf_counter()
    return {**sft(cfg, per_task), "wall_s": time.perf_counter() - t0}


def rl_config(layout: Layout, config: str | Path | None, overrides: list[str],
              tracking: dict[str, Any] | None = None) -> Any:
    """RL from the layout's SFT model on its exported train split (`config`: a TrainConfig YAML)."""
    from envace.trainers.config import TrainConfig

    values: dict[str, Any] = {"model": str(layout.sft_model), "out_dir": str(layout.rl)}
    if tracking:
        values["tracking"] = tracking
    return load_config(TrainConfig, config, ["data.source=cm2", f"data.path={layout.train_json}", *overrides],
                       **values)


def run_rl(cfg: Any, final: str | Path | None = None) -> dict[str, Any]:
    """Embedded RL training (it resumes from `<out_dir>/checkpoints`). With `final`, the run starts clean
    (old checkpoints and `final` removed) and its last checkpoint is copied to `final`."""
    from envace.trainers.embedded import train

    if final is not None:
        shutil.rmtree(Path(cfg.out_dir) / "checkpoints", ignore_errors=True)
        shutil.rmtree(final, ignore_errors=True)
    t0 = time.perf_counter()
    res = train(cfg)
    wall = time.perf_counter() - t0
    if not res.checkpoint:
        raise RuntimeError(f"training in {cfg.out_dir} wrote no checkpoint; delete the directory and run again")
    if final is not None:
        shutil.copytree(res.checkpoint, final)
    last = res.history[-1] if res.history else {}
    return {"out_dir": str(res.out_dir), "last_step": res.last_step, "checkpoint": str(res.checkpoint),
            "mlflow_run_id": res.mlflow_run_id, "reward/mean": last.get("reward/mean"), "wall_s": wall}


def eval_overrides(layout: Layout, overrides: list[str]) -> list[str]:
    """EvalConfig overrides that point the tool world at the layout's exported test split."""
    return ["data.source=cm2", f"data.path={layout.test_json}", *overrides]


def evaluate(checkpoint: str | Path, layout: Layout, overrides: list[str],
             benchmarks: tuple[str, ...] = ("world",)) -> dict[str, Any]:
    """One checkpoint on the layout's test split (results in `<layout.eval>/eval.json`). The flow fans the
    same overrides out per benchmark with flows/evaluate.py instead."""
    from envace.evaluation.config import EvalConfig
    from envace.evaluation.run import run_eval

    cfg = load_config(EvalConfig, None, eval_overrides(layout, overrides), model=str(checkpoint),
                      benchmarks=list(benchmarks), out_dir=str(layout.eval))
    return run_eval(cfg)


def as_overrides(section: dict[str, Any], skip: tuple[str, ...] = ()) -> list[str]:
    """A params.yaml section as `key=value` overrides (nested mappings as dotted keys)."""
    out: list[str] = []
    for key, value in section.items():
        if key in skip:
            continue
        if isinstance(value, dict):
            out += [f"{key}.{o}" for o in as_overrides(value)]
        else:
            out.append(f"{key}={str(value).lower() if isinstance(value, bool) else value}")
    return out


def run_step(step: str, params: dict[str, Any], layout: Layout) -> Any:
    """One DVC stage from params.yaml's sections (see dvc.yaml)."""
    missing = [s for s in ({"evaluate": "eval"}.get(step, step),) if s not in params]
    if step not in STEPS or missing:
        raise ValueError(f"step {step!r} needs one of {STEPS} and its section in params.yaml (missing: {missing})")
    if step == "data":
        d = params["data"]
        return build_data(layout.data, {"train": d["n_train"], "val": d["n_val"], "test": d["n_test"]}, d["seed"])
    if step == "model":
        m = params["model"]
        return build_model(layout.model, m["corpus_tasks"], model_config(as_overrides(m, skip=("corpus_tasks",))))
    if step == "sft":
        return run_sft(sft_config(layout, [*as_overrides(params["sft"]), "progress=false"]))
    if step == "rl":
        r = params["rl"]
        cfg = rl_config(layout, r.get("config"), [*as_overrides(r, skip=("config",)), "progress=false"])
        return run_rl(cfg, final=layout.rl_final)
    return evaluate(layout.rl_final, layout, as_overrides(params["eval"]))


def main(argv: list[str] | None = None) -> int:
    import json

    import yaml

    ap = argparse.ArgumentParser(prog="python -m envace.pipeline", description="Run one pipeline step (a DVC stage).")
    ap.add_argument("step", choices=STEPS)
    ap.add_argument("--params", default="params.yaml", help="Parameters file (dvc.yaml's params.yaml).")
    ap.add_argument("--root", default=".", help="Repository root the outputs are written under.")
    a = ap.parse_args(argv)
    params = yaml.safe_load(Path(a.params).read_text()) or {}
    out = run_step(a.step, params, Layout.repo(a.root))
    print(json.dumps(out, indent=2, default=str) if not isinstance(out, Path) else out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
