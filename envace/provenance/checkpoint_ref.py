"""Which checkpoint a score belongs to: the model directory, its content hash and the training run that
wrote it, shared by MLflow (a training run's checkpoints; an eval run's link to the checkpoint it scored)
and the trajectory store (an eval store run's identity).

The content hash is DVC's directory md5 (`envace.provenance.dvc_hash.content_hash`) of the *model* directory
that is served: `policy/` (or `act/`) of a `step_*` checkpoint, or a plain HF model directory. The
optimizer state and meta.json are left out, so the hash names the weights and tokenizer that were scored:
a checkpoint copied elsewhere, or exported without its optimizer, keeps its hash. A training run's
identity comes from the checkpoint's `meta.json` (`mlflow_run_id`, `store_run_id`, written by the trainer).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from envace.provenance.dvc_hash import content_hash

STEP_DIR = re.compile(r"^step_(\d{6,})$")
MODEL_SUBDIRS = ("policy", "act")  # the served model of a checkpoint, in order of preference


def model_dir_of(path: str | Path) -> Path:
    """A model dir, or a `step_*` checkpoint dir (its `policy/` or `act/` model)."""
    p = Path(path)
    for sub in MODEL_SUBDIRS:
        if (p / sub / "config.json").is_file():
            return p / sub
    return p


@dataclass(frozen=True)
class CheckpointRef:
    model_dir: str  # the served model (absolute path), or the endpoint's "<base_url>#<model>"
    content_hash: str  # DVC md5 of model_dir, or "name:<...>" for a model that is not a local directory
    step: int | None = None  # the training step of a step_* checkpoint
    step_dir: str | None = None
    train_mlflow_run_id: str | None = None
    train_store_run_id: str | None = None

    def tags(self) -> dict[str, str]:
        """MLflow tags linking a run to this checkpoint (unknown fields left out)."""
        out = {"envace.checkpoint.path": self.model_dir, "envace.checkpoint.hash": self.content_hash}
        if self.step is not None:
            out["envace.checkpoint.step"] = str(self.step)
        if self.step_dir:
            out["envace.checkpoint.dir"] = self.step_dir
        if self.train_mlflow_run_id:
            out["envace.train_run_id"] = self.train_mlflow_run_id
        if self.train_store_run_id:
            out["envace.train_store_run_id"] = self.train_store_run_id
        return out

    @classmethod
    def for_name(cls, name: str) -> CheckpointRef:
        """A model that is not a local directory (an OpenAI-compatible endpoint): named, not hashed."""
        return cls(model_dir=name, content_hash=f"name:{name}")


def checkpoint_ref(path: str | Path) -> CheckpointRef:
    """The reference of a local model or `step_*` checkpoint directory (raises FileNotFoundError when
    there is no such directory)."""
    model = model_dir_of(path).resolve()
    if not model.is_dir():
        raise FileNotFoundError(f"model directory {model} does not exist; pass a model dir or a step_* checkpoint")
    step_dir = model.parent if STEP_DIR.match(model.parent.name) else (model if STEP_DIR.match(model.name) else None)
    meta: dict = {}
    if step_dir is not None and (step_dir / "meta.json").is_file():
        try:
            loaded = json.loads((step_dir / "meta.json").read_text())
            meta = loaded if isinstance(loaded, dict) else {}
        except (ValueError, UnicodeDecodeError):
            meta = {}  # a damaged meta.json: the weights are still hashable, only the link is unknown
    return CheckpointRef(
        model_dir=str(model), content_hash=content_hash(model),
        step=int(STEP_DIR.match(step_dir.name).group(1)) if step_dir is not None else None,
        step_dir=str(step_dir) if step_dir is not None else None,
        train_mlflow_run_id=meta.get("mlflow_run_id") or None, train_store_run_id=meta.get("store_run_id") or None)
