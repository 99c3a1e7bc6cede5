"""Checkpoints: `step_000123/` directories holding HF model dirs, optimizer state and `meta.json`.

A checkpoint is written into a temporary sibling directory and renamed into place, so a run killed
mid-save never leaves a half-written `step_*` directory; `latest_checkpoint` only sees complete ones.
`meta.json` carries the resolved config, the git commit, the step and the RNG state — nanochat's habit
of keeping a checkpoint's config beside it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

STEP_RE = re.compile(r"^step_(\d{6,})$")
META = "meta.json"


@dataclass
class Checkpoint:
    path: Path
    step: int
    meta: dict[str, Any]

    def model_dir(self, name: str = "policy") -> Path:
        return self.path / name


def step_dir_name(step: int) -> str:
    return f"step_{step:06d}"


def save_checkpoint(root: str | Path, step: int, models: dict[str, Any], tokenizer: Any,
                    optimizers: dict[str, torch.optim.Optimizer], meta: dict[str, Any], keep: int = 2) -> Path:
    """Save `models` (name -> HF model) and optimizer states atomically as root/step_XXXXXX."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    final = root / step_dir_name(step)
    tmp = root / f".tmp_{step_dir_name(step)}_{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    for name, model in models.items():
        model.save_pretrained(tmp / name, safe_serialization=True)
        tokenizer.save_pretrained(tmp / name)
    torch.save({name: opt.state_dict() for name, opt in optimizers.items()}, tmp / "optim.pt")
    (tmp / META).write_text(json.dumps({**meta, "step": step}, indent=2, default=str))
    if final.exists():  # a re-run of the same step after resume: replace it
        shutil.rmtree(final)
    os.replace(tmp, final)
    _prune(root, keep)
    return final


def _prune(root: Path, keep: int) -> None:
    steps = sorted(list_checkpoints(root), key=lambda c: c.step)
    for ckpt in steps[:-keep]:
        shutil.rmtree(ckpt.path, ignore_errors=True)
    for stale in root.glob(".tmp_step_*"):
        shutil.rmtree(stale, ignore_errors=True)


def list_checkpoints(root: str | Path) -> list[Checkpoint]:
    root = Path(root)
    out = []
    if not root.is_dir():
        return out
    for d in root.iterdir():
        m = STEP_RE.match(d.name)
        if m and (d / META).is_file():
            out.append(Checkpoint(d, int(m.group(1)), json.loads((d / META).read_text())))
    return sorted(out, key=lambda c: c.step)


def latest_checkpoint(root: str | Path) -> Checkpoint | None:
    ckpts = list_checkpoints(root)
    return ckpts[-1] if ckpts else None


def load_optimizer_states(ckpt: Checkpoint, optimizers: dict[str, torch.optim.Optimizer]) -> None:
    states = torch.load(ckpt.path / "optim.pt", map_location="cpu", weights_only=False)
    for name, opt in optimizers.items():
        opt.load_state_dict(states[name])
