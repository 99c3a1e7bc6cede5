"""Sweep prerequisites: the SFT checkpoints a sweep's cells start from, built once and reused.

A sweep YAML may name SFT checkpoints under `sft:` (e.g. one per tiny-model size). Before any cell runs,
the sweep flow builds each one (a Prefect task per checkpoint: `envace_flows.common.prepare_sft`): a tiny
Qwen3-architecture model and tokenizer from the world corpus, then the SFT cold start on oracle Act and
Rehearse demonstrations (`envace.trainers.sft`). The result is cached by a key file in the checkpoint
directory: the sha256 of the spec (`SFTSpec.digest()`) and the code version (`envace.sweeps.cache`). A
re-run with the same key reuses the directory; a different key (edited spec or code) rebuilds it. Cells
name the checkpoint's model as `<sft out>/model`, which also enters their own cache keys through the
model directory's content hash, so a rebuilt SFT re-runs every cell that starts from it.

`baselines:` in the sweep adds, per named checkpoint, evaluation cells of the SFT model itself (no RL):
the "base vs trained" rows of the table, evaluated exactly like the trained cells.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any

from pydantic import Field

from envace.config import BaseConfig

KEY_FILE = "sft_key"


class SFTSpec(BaseConfig):
    """One SFT checkpoint a sweep starts from (defaults: the demo's recipe, envace/demo.py)."""

    out: str = Field(..., description="Checkpoint directory; cells use <out>/model.")
    corpus_tasks: int = Field(600, ge=10, description="World tasks for the tokenizer corpus.")
    sft_tasks: int = Field(3000, ge=10, description="Demonstration tasks for SFT.")
    steps: int = Field(1400, ge=1, description="SFT steps (batch 16).")
    seed: int = Field(0, description="Seed of tokenizer, weights and SFT data.")
    error_demos: float = Field(0.0, ge=0, le=1, description="SFTConfig.error_demos: share of gold calls that also "
                                                            "get a wrong twin answered by the real world.")
    tiny: dict[str, Any] = Field(default_factory=dict,
                                 description="TinyModelConfig fields (e.g. hidden_size) of this model size.")

    def model_dir(self) -> Path:
        return Path(self.out) / "model"


def sft_key(spec: SFTSpec) -> str:
    from envace.sweeps.cache import code_version

    return hashlib.sha256(json.dumps({"spec": spec.digest(), "code": code_version()}).encode()).hexdigest()[:24]


def is_built(spec: SFTSpec) -> bool:
    marker = Path(spec.out) / KEY_FILE
    return ((spec.model_dir() / "config.json").is_file() and marker.is_file()
            and marker.read_text().strip() == sft_key(spec))


def parallel_threads(n_builds: int, workers: int, cpus: int | None = None) -> int:
    """Torch threads per SFT build when `min(n_builds, workers)` run at once on `cpus` cores (default: this
    machine's): the cores split between them. Default torch threads in each of two parallel builds put
    four spinning threads on two cores; the sweep of paper_ablations measured its two SFTs several times
    slower per step than one build alone."""
    cpus = cpus or os.cpu_count() or 1
    return max(1, cpus // max(1, min(n_builds, workers)))


def build_sft(spec: SFTSpec, threads: int | None = None) -> dict[str, Any]:
    """Build the checkpoint unless one with the same key is there; returns {out, model, key, cached, wall_s}.
    `threads` (torch threads) is how it runs, not what it builds: it is not part of the key."""
    t0 = time.perf_counter()
    key = sft_key(spec)
    if is_built(spec):
        return {"out": spec.out, "model": str(spec.model_dir()), "key": key, "cached": True, "wall_s": 0.0}
    from envace.data.config import DataConfig
    from envace.models.corpus import world_corpus
    from envace.models.tiny import TinyModelConfig, init_tiny_model
    from envace.trainers.config import SFTConfig
    from envace.trainers.sft import sft

    out = Path(spec.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / KEY_FILE).unlink(missing_ok=True)  # a crash mid-build leaves no key, so the next run rebuilds
    tiny = init_tiny_model(world_corpus(spec.corpus_tasks, seed=spec.seed), out / "tiny",
                           TinyModelConfig(**{"seed": spec.seed, **spec.tiny}))
    summary = sft(SFTConfig(model=str(tiny), out_dir=str(out), steps=spec.steps, seed=spec.seed, progress=False,
                            threads=threads, data=DataConfig(n_tasks=spec.sft_tasks, seed=spec.seed),
                            error_demos=spec.error_demos))
    (out / KEY_FILE).write_text(key + "\n")
    return {"out": spec.out, "model": str(spec.model_dir()), "key": key, "cached": False,
            "wall_s": time.perf_counter() - t0,
            "sft": {k: v for k, v in summary.items() if isinstance(v, (int, float, str))}}
