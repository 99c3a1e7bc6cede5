"""Checkpoints: `step_000123/` directories holding HF model dirs, optimizer state and `meta.json`.

A checkpoint is written into a temporary sibling directory, its files synced to disk, and renamed into
place, so a run killed mid-save never leaves a half-written `step_*` directory. `meta.json` carries the
resolved config (secrets masked: `envace.secrets`), the git commit, the step, and `files`: the size of
every file of the checkpoint — nanochat's habit of keeping a checkpoint's config beside it, plus a manifest.

A checkpoint can still be damaged after it was written (a full disk, a copy cut short, a storage fault).
`latest_checkpoint` therefore verifies each candidate, newest first — `meta.json` parses, every file has its
recorded size, every `*.safetensors` header is whole and `optim.pt`'s zip records pass their CRC — and
falls back to the newest intact one, warning which it skipped and why. When none is intact it raises
`CorruptCheckpointError` naming the file.

Loading a checkpoint never executes code from it (checkpoints travel through shared storage): weights are
read only as safetensors (a model dir without them, or any pickle-format file such as `*.bin` / `*.pkl`, is
refused), every `*.json` must parse as JSON, and `optim.pt` is read with `torch.load(weights_only=True)`,
whose unpickler admits tensors and plain values only; anything else is refused with one line naming the file.

Before writing, the free space is compared with the checkpoint's size (its tensors plus a margin,
`checkpoint_bytes`); a disk that is too small is refused with nothing written. A write that fails anyway
(another process took the space, a read-only filesystem, permissions) removes its temporary folder and
raises `CheckpointWriteError` saying what failed, which file was being written and, for a full disk, the
bytes needed and free (envace.trainers.checkpoint_space).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import warnings
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from envace.models.loading import save_model
from envace.trainers.checkpoint_space import (
    CheckpointWriteError,
    checkpoint_bytes,
    free_bytes,
    release_frames,
    tree_bytes,
)

STEP_RE = re.compile(r"^step_(\d{6,})$")
META = "meta.json"
OPTIM = "optim.pt"
# formats whose loaders unpickle (torch.load, pickle, numpy object arrays) or run code: never in a checkpoint
UNSAFE_SUFFIXES = (".bin", ".pt", ".pth", ".pkl", ".pickle", ".ckpt", ".npy", ".npz", ".joblib", ".py", ".pyc")
SAFE_WEIGHTS = ("model.safetensors", "model.safetensors.index.json")


class CorruptCheckpointError(ValueError):
    """A checkpoint file is missing, truncated or unreadable; `path` names the file."""

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path, self.reason = Path(path), reason


def _check_space(root: Path, final: Path, needed: int) -> None:
    """Refuse, before writing anything, a disk that cannot hold the checkpoint."""
    free = free_bytes(root)
    if free < needed:
        raise CheckpointWriteError(final, None, needed, free, writing=str(root))


def _save_optimizers(optimizers: dict[str, torch.optim.Optimizer], path: Path) -> None:
    torch.save({name: opt.state_dict() for name, opt in optimizers.items()}, path)


def own_resume_meta(meta: dict[str, Any], out_dir: str | Path) -> dict[str, Any]:
    """The resume meta a run in `out_dir` may continue. A checkpoint written for another run folder that
    still exists (this folder is a copy of it) must not continue that folder's MLflow and store runs —
    both would log into one run, the copy's metrics dropped as already logged — so the copy starts its
    own, tagged with the parent's MLflow run id. A moved folder (the old path is gone) continues."""
    recorded = meta.get("out_dir")
    here = Path(out_dir).resolve()
    if not recorded or Path(recorded) == here or not Path(recorded).is_dir():
        return meta
    warnings.warn(f"{here} holds checkpoints of the run folder {recorded} (a copy): starting a new MLflow run "
                  f"(tag envace.copied_from={meta.get('mlflow_run_id')}) instead of continuing that one's",
                  stacklevel=2)
    own = {k: v for k, v in meta.items() if k not in ("mlflow_run_id", "store_run_id")}
    return {**own, "copied_from": meta.get("mlflow_run_id")}


@dataclass
class Checkpoint:
    path: Path
    step: int
    meta: dict[str, Any]

    def model_dir(self, name: str = "policy") -> Path:
        return self.path / name


def step_dir_name(step: int) -> str:
    return f"step_{step:06d}"


def _fsync_tree(root: Path) -> None:
    """Flush every file and directory under `root` to disk (a rename is only atomic for synced data)."""
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            fd = os.open(os.path.join(dirpath, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        _fsync_dir(Path(dirpath))


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # some filesystems cannot open directories; the rename is still atomic there
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _manifest(root: Path) -> dict[str, int]:
    return {p.relative_to(root).as_posix(): p.stat().st_size for p in sorted(root.rglob("*")) if p.is_file()}


def save_checkpoint(root: str | Path, step: int, models: dict[str, Any], tokenizer: Any,
                    optimizers: dict[str, torch.optim.Optimizer], meta: dict[str, Any], keep: int = 2) -> Path:
    """Save `models` (name -> HF model) and optimizer states atomically as root/step_XXXXXX."""
    from envace.secrets import mask_secrets

    root = Path(root)
    final = root / step_dir_name(step)
    tmp = root / f".tmp_{step_dir_name(step)}_{os.getpid()}"
    needed = checkpoint_bytes(models, optimizers)
    _check_space(root, final, needed)
    writing = str(final)
    try:
        root.mkdir(parents=True, exist_ok=True)
        if tmp.exists():
            shutil.rmtree(tmp)
        tmp.mkdir()
        for name, model in models.items():
            writing = str(final / name / "model.safetensors")
            save_model(model, tokenizer, tmp / name)  # quiet, umask file modes
        writing = str(final / OPTIM)
        _save_optimizers(optimizers, tmp / OPTIM)
        writing = str(final / META)
        record = mask_secrets({**meta, "step": step, "files": _manifest(tmp)})
        (tmp / META).write_text(json.dumps(record, indent=2, default=str))
        _fsync_tree(tmp)
    except BaseException as exc:  # safetensors' errors are not OSErrors; torch's are RuntimeErrors
        # the failed writers' frames hold their files open (torch's zip writer does): release them, or the
        # removed files would keep their space until the error is collected
        release_frames(exc)
        # measured before the temporary folder goes: what was free while it was being written
        free, written = free_bytes(root), tree_bytes(tmp)
        shutil.rmtree(tmp, ignore_errors=True)  # a half-written step must not keep the disk full
        if not isinstance(exc, Exception):  # Ctrl-C, SIGTERM: stop as asked, without a write error
            raise
        raise CheckpointWriteError(final, exc, needed, free + written, writing) from exc
    old = None
    if final.exists():  # a re-run of the same step after resume: move the old one aside, then replace it
        old = root / f".old_{step_dir_name(step)}_{os.getpid()}"
        if old.exists():
            shutil.rmtree(old)
        os.replace(final, old)
    os.replace(tmp, final)
    _fsync_dir(root)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
    _prune(root, keep)
    return final


def _step_dirs(root: Path) -> list[tuple[int, Path]]:
    """Every `step_*` directory under `root`, oldest first (intact or not)."""
    if not root.is_dir():
        return []
    out = [(int(m.group(1)), d) for d in root.iterdir() if d.is_dir() and (m := STEP_RE.match(d.name))]
    return sorted(out)


def _prune(root: Path, keep: int) -> None:
    for _step, path in _step_dirs(root)[:-keep]:
        shutil.rmtree(path, ignore_errors=True)
    for pattern in (".tmp_step_*", ".old_step_*"):
        for stale in root.glob(pattern):
            shutil.rmtree(stale, ignore_errors=True)


def _check_safetensors(path: Path) -> None:
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="pt") as f:
            keys = list(f.keys())
            if keys:  # the last tensor's data reaches the end of the file only when nothing was cut off
                f.get_slice(keys[-1])
    except Exception as exc:  # noqa: BLE001 - safetensors raises its own error types; all mean "unreadable"
        raise CorruptCheckpointError(path, f"unreadable safetensors file ({type(exc).__name__}: {exc})") from None


def _check_zip(path: Path) -> None:
    try:
        with zipfile.ZipFile(path) as z:
            bad = z.testzip()
    except (zipfile.BadZipFile, OSError, EOFError) as exc:
        raise CorruptCheckpointError(path, f"not a readable torch.save archive ({exc})") from None
    if bad is not None:
        raise CorruptCheckpointError(path, f"record {bad} fails its CRC check")


def _check_no_code(path: Path) -> None:
    """Refuse files whose loaders could execute code, JSON that does not parse, and model dirs without
    safetensors weights (transformers would otherwise look for `pytorch_model.bin`)."""
    for f in sorted(p for p in path.rglob("*") if p.is_file()):
        rel = f.relative_to(path).as_posix()
        if rel != OPTIM and f.suffix.lower() in UNSAFE_SUFFIXES:
            raise CorruptCheckpointError(f, f"refused: a {f.suffix} file can carry a pickle payload or code; "
                                         "checkpoints hold weights only as safetensors (delete the file if you "
                                         "trust it, or take the checkpoint from its source again)")
        if f.suffix == ".json":
            try:
                json.loads(f.read_text(encoding="utf-8"))
            except (UnicodeDecodeError, ValueError, RecursionError) as exc:
                raise CorruptCheckpointError(f, f"not valid JSON ({type(exc).__name__})") from None
    for sub in sorted(d for d in path.iterdir() if d.is_dir()):
        if (sub / "config.json").is_file() and not any((sub / w).is_file() for w in SAFE_WEIGHTS):
            raise CorruptCheckpointError(sub / SAFE_WEIGHTS[0], "missing: checkpoint weights are read only as "
                                         "safetensors")


def verify_checkpoint(path: str | Path) -> Checkpoint:
    """The checkpoint at `path` if it is intact; otherwise `CorruptCheckpointError` naming the bad file."""
    path = Path(path)
    m = STEP_RE.match(path.name)
    if m is None:
        raise CorruptCheckpointError(path, "not a step_XXXXXX checkpoint directory")
    meta_path = path / META
    if not meta_path.is_file():
        raise CorruptCheckpointError(meta_path, "missing")
    try:
        meta = json.loads(meta_path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise CorruptCheckpointError(meta_path, f"not valid JSON ({exc})") from None
    if not isinstance(meta, dict):
        raise CorruptCheckpointError(meta_path, f"top level is {type(meta).__name__}, not an object")
    for rel, size in (meta.get("files") or {}).items():
        f = path / rel
        if not f.is_file():
            raise CorruptCheckpointError(f, "missing (listed in meta.json)")
        if f.stat().st_size != size:
            raise CorruptCheckpointError(f, f"{f.stat().st_size} bytes, meta.json recorded {size} (truncated?)")
    _check_no_code(path)
    for st in sorted(path.rglob("*.safetensors")):
        _check_safetensors(st)
    optim = path / OPTIM
    if not optim.is_file():
        raise CorruptCheckpointError(optim, "missing")
    _check_zip(optim)
    return Checkpoint(path, int(m.group(1)), meta)


def list_checkpoints(root: str | Path) -> list[Checkpoint]:
    """The intact checkpoints under `root`, oldest first (damaged ones are left out silently)."""
    out = []
    for _step, path in _step_dirs(Path(root)):
        try:
            out.append(verify_checkpoint(path))
        except CorruptCheckpointError:
            continue
    return out


def latest_checkpoint(root: str | Path) -> Checkpoint | None:
    """The newest intact checkpoint under `root` (None when there is none at all). A damaged newer one is
    skipped with a warning naming its file and why; if every one is damaged, `CorruptCheckpointError`."""
    skipped: list[CorruptCheckpointError] = []
    for _step, path in reversed(_step_dirs(Path(root))):
        try:
            ckpt = verify_checkpoint(path)
        except CorruptCheckpointError as exc:
            skipped.append(exc)
            continue
        for exc in skipped:
            warnings.warn(f"skipping damaged checkpoint {exc.path.relative_to(Path(root)).parts[0]}: {exc}; "
                          f"resuming from {ckpt.path.name} instead", stacklevel=2)
        return ckpt
    if skipped:
        detail = "; ".join(str(e) for e in skipped)
        raise CorruptCheckpointError(skipped[0].path, f"no intact checkpoint under {root} ({detail}); "
                                     f"restore a checkpoint there or move {root} away to start from the initial model")
    return None


def load_optimizer_states(ckpt: Checkpoint, optimizers: dict[str, torch.optim.Optimizer]) -> None:
    path = ckpt.path / OPTIM
    import pickle

    try:  # weights_only: the restricted unpickler admits tensors, numbers, strings and containers, no code
        states = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        found = re.search(r"WeightsUnpickler error: ([^\n]*)", str(exc))
        first = found.group(1).split(". Please")[0].strip() if found else type(exc).__name__
        raise CorruptCheckpointError(path, "refused: holds objects other than tensors and plain values "
                                     f"({first[:200]}); a checkpoint from an untrusted source may carry code") from None
    except Exception as exc:  # noqa: BLE001 - torch raises RuntimeError / zip errors alike
        detail = " ".join(str(exc).split())[:200]
        raise CorruptCheckpointError(path, f"cannot load optimizer state ({type(exc).__name__}: {detail})") from None
    if not isinstance(states, dict):
        raise CorruptCheckpointError(path, f"top level is {type(states).__name__}, not a dict of optimizer states")
    missing = [name for name in optimizers if name not in states]
    if missing:
        raise CorruptCheckpointError(path, f"no optimizer state for {missing} (has {sorted(states)}); the checkpoint "
                                     f"was written with another policy= setting")
    for name, opt in optimizers.items():
        opt.load_state_dict(states[name])
