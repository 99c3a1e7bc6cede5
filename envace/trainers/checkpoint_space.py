"""A checkpoint write that cannot finish: the size a checkpoint needs, the free space, and the one-line
error that says what failed (no space, quota, read-only, permission), where, and for a full disk the bytes
needed and free (envace.trainers.checkpoint writes; this module measures and explains).

torch reports a full disk as an opaque RuntimeError ("unexpected pos") and safetensors as a SafetensorError
quoting the OS error: the OS error, else the free space measured before the temporary folder is removed,
decides.
"""

from __future__ import annotations

import errno
import gc
import shutil
import traceback
from pathlib import Path
from typing import Any

import torch

SLACK_BYTES = 1 << 20  # tokenizer, config and meta files beside the tensors
NO_SPACE = "no space left on device"


class CheckpointWriteError(OSError):
    """A checkpoint could not be written; says what failed (no space, read-only, permission) and where, and
    for a full disk the bytes the checkpoint needs and the bytes that were free. Its temporary folder is
    already removed."""

    def __init__(self, final: Path, exc: BaseException | None, needed: int | None = None, free: int | None = None,
                 writing: str | None = None) -> None:
        code = exc.errno if isinstance(exc, OSError) else errno.ENOSPC if exc is None else None
        root = final.parent
        if code is None and _says_no_space(exc):
            code = errno.ENOSPC
        if code is None and free is not None and needed is not None and free < needed:
            code = errno.ENOSPC  # torch's zip writer reports a full disk only as "unexpected pos" / "write failed"
        reason, fix = {
            errno.ENOSPC: (NO_SPACE, "free space there or set out_dir on a larger disk"),
            errno.EDQUOT: ("disk quota exceeded", "free space in your quota or set out_dir elsewhere"),
            errno.EROFS: ("the filesystem is read-only", "set out_dir on a writable filesystem"),
            errno.EACCES: ("permission denied", f"make {root} writable or set out_dir elsewhere"),
            errno.EPERM: ("permission denied", f"make {root} writable or set out_dir elsewhere"),
        }.get(code, (" ".join(str(exc).split())[:200] or type(exc).__name__, "check the disk and the path"))
        if code in (errno.ENOSPC, errno.EDQUOT) and needed is not None and free is not None:
            reason += f" (needs about {needed} bytes, {free} bytes free)"
        where = writing or getattr(exc, "filename", None) or root
        super().__init__(code or errno.EIO, f"cannot write checkpoint {final.name} in {root}: {reason} "
                         f"(writing {where}); {fix}", str(where))
        self.path, self.reason, self.needed, self.free = final, reason, needed, free

    def __str__(self) -> str:
        return self.strerror or super().__str__()


def _says_no_space(exc: BaseException | None) -> bool:
    """Writers that are not OSErrors (safetensors' SafetensorError) still quote the OS error."""
    text = str(exc)
    return "os error 28" in text or "No space left on device" in text


def free_bytes(path: Path) -> int:
    for p in (path, *path.parents):  # the nearest folder that exists
        try:
            return shutil.disk_usage(p).free
        except OSError:
            continue
    return 1 << 62


def checkpoint_bytes(models: dict[str, Any], optimizers: dict[str, torch.optim.Optimizer]) -> int:
    """Bytes a checkpoint of these models and optimizer states takes, about: every tensor once, plus
    SLACK_BYTES for the tokenizer, configs and meta."""
    n = SLACK_BYTES
    for model in models.values():
        n += sum(t.numel() * t.element_size() for t in model.state_dict().values())
    for opt in optimizers.values():
        n += sum(v.numel() * v.element_size() for state in opt.state.values() for v in state.values()
                 if torch.is_tensor(v))
    return n


def release_frames(exc: BaseException) -> None:
    """Clear the locals of the frames of `exc` and the errors it arose from (a writer's `__exit__` that fails
    again chains the first error), so what they held open is closed now."""
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        traceback.clear_frames(e.__traceback__)
        e = e.__cause__ or e.__context__
    gc.collect()


def tree_bytes(root: Path) -> int:
    try:
        return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())
    except OSError:
        return 0
