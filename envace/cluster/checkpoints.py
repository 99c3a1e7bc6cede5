"""verl checkpoints -> Hugging Face model directories, with verl's own model merger.

A verl 0.9 run saves `<trainer.default_local_dir>/global_step_<N>/actor/` every `save_freq` steps: per
rank `model_world_size_<W>_rank_<R>.pt` (DTensor shards), optimizer and extra state, `fsdp_config.json`
(FSDP version, world size) and `huggingface/` (config + tokenizer). `find_checkpoints` lists them in step
order; `merge_checkpoint` runs `python -m verl.model_merger merge --backend fsdp --local_dir ...
--target_dir ...` (the documented command, in a child process: merging an 8B model holds every shard in
memory once) and records what it merged in `<target>/merged_from.json`, so a re-run of the pipeline skips
checkpoints whose shards have not changed. The merger writes bf16 weights whatever the training dtype.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from pydantic import Field

from envace.config import BaseConfig

_STEP_DIR = re.compile(r"^global_step_(\d+)$")
MARKER = "merged_from.json"


class VerlCheckpoint(BaseConfig):
    step: int = Field(..., description="Training step of the checkpoint (global_step_N).")
    actor_dir: str = Field(..., description="The FSDP actor directory verl wrote.")


def find_checkpoints(root: str | Path, steps: list[int] | None = None) -> list[VerlCheckpoint]:
    """The `global_step_N/actor` directories under `root` that hold an FSDP checkpoint, by step."""
    base = Path(root)
    if not base.is_dir():
        raise FileNotFoundError(2, "no verl checkpoint directory (trainer.default_local_dir); train first or "
                                   "point checkpoints= at the directory holding global_step_N/", str(root))
    found = []
    for d in base.iterdir():
        m = _STEP_DIR.match(d.name)
        if m and (d / "actor" / "fsdp_config.json").is_file():
            found.append(VerlCheckpoint(step=int(m.group(1)), actor_dir=str(d / "actor")))
    found.sort(key=lambda c: c.step)
    if steps is not None:
        missing = sorted(set(steps) - {c.step for c in found})
        if missing:
            raise FileNotFoundError(2, f"no checkpoint for steps {missing}; found {[c.step for c in found]}",
                                    str(root))
        found = [c for c in found if c.step in set(steps)]
    return found


def shard_signature(actor_dir: str | Path) -> dict[str, list[int]]:
    """{file: [size, mtime_ns]} of the model shards and fsdp_config.json (what the merge reads)."""
    d = Path(actor_dir)
    files = sorted([*d.glob("model_world_size_*_rank_*.pt"), d / "fsdp_config.json"])
    return {f.name: [f.stat().st_size, f.stat().st_mtime_ns] for f in files if f.is_file()}


def is_merged(ckpt: VerlCheckpoint, target: str | Path) -> bool:
    marker = Path(target) / MARKER
    if not (marker.is_file() and (Path(target) / "config.json").is_file()):
        return False
    recorded = json.loads(marker.read_text())
    return recorded.get("actor_dir") == ckpt.actor_dir and recorded.get("shards") == shard_signature(ckpt.actor_dir)


def merge_checkpoint(ckpt: VerlCheckpoint, target: str | Path, log_path: str | Path | None = None) -> dict:
    """Merge one checkpoint into the HF directory `target` (skipped when already merged from the same
    shards); returns {step, target, cached}."""
    out = Path(target)
    if is_merged(ckpt, out):
        return {"step": ckpt.step, "target": str(out), "cached": True}
    from envace.extras import check

    check("verl", "cluster", "merging a verl checkpoint")  # the merger runs in a subprocess: say why up front
    (out / MARKER).unlink(missing_ok=True)  # a merge that dies half-way leaves no marker
    cmd = [sys.executable, "-m", "verl.model_merger", "merge", "--backend", "fsdp", "--local_dir", ckpt.actor_dir,
           "--target_dir", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if log_path:
        Path(log_path).parent.mkdir(parents=True, exist_ok=True)
        Path(log_path).write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        raise RuntimeError(f"verl's model merger failed on {ckpt.actor_dir} (exit {proc.returncode}): "
                           f"{proc.stderr[-2000:]}")
    (out / MARKER).write_text(json.dumps({"step": ckpt.step, "actor_dir": ckpt.actor_dir,
                                          "shards": shard_signature(ckpt.actor_dir)}, indent=2))
    return {"step": ckpt.step, "target": str(out), "cached": False}
