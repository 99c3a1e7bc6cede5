"""A checkpoint that does not fit the disk says "no space left on device" with the path, the bytes it needs
and the bytes free, and leaves no temporary folder, on both writers: the model's safetensors file and
torch's optim.pt. The disk is real: a tmpfs of a chosen size (mounting needs root; without it those tests
skip), and the writers' own errors are what they raise on it. A check before writing refuses a disk that
is already too small; the tests that reach the writers turn that check off, so the disk fills mid-write
as it does when another process takes the space. One test without root raises the writers' errors by
hand (the same messages the tmpfs runs produced)."""

from __future__ import annotations

import errno
import os
import subprocess
from pathlib import Path

import pytest
import torch

from envace.cli_errors import classify
from envace.models.loading import load_policy
from envace.trainers import checkpoint as ckpt_mod
from envace.trainers.checkpoint import CheckpointWriteError, checkpoint_bytes, save_checkpoint
from envace.trainers.checkpoint_space import SLACK_BYTES


@pytest.fixture(scope="module")
def trained(tiny_model_dir):
    model, tok = load_policy(tiny_model_dir, device="cpu")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.tensor([[1, 2, 3]])).logits.sum().backward()
    opt.step()  # optimizer state exists: optim.pt is about twice the weights
    return model, tok, opt


@pytest.fixture
def tmpfs(tmp_path):
    """mount(size) -> a directory on a tmpfs of that many bytes; unmounted afterwards."""
    mounted: list[Path] = []

    def mount(size: int) -> Path:
        where = tmp_path / f"disk{len(mounted)}"
        where.mkdir()
        res = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
                             capture_output=True, text=True)
        if res.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here (needs root): {res.stderr.strip()}")
        mounted.append(where)
        return where

    yield mount
    busy = []
    for where in mounted:
        if subprocess.run(["umount", str(where)], capture_output=True).returncode != 0:
            busy.append(where)
            subprocess.run(["umount", "-l", str(where)], capture_output=True)
    assert not busy, f"files left open on {busy}"


def _says_no_space(err: pytest.ExceptionInfo, root: Path, needed: int) -> str:
    msg = str(err.value)
    assert "no space left on device" in msg and str(root) in msg and "step_000001" in msg and "\n" not in msg, msg
    assert f"needs about {needed} bytes" in msg and " bytes free" in msg, msg
    assert err.value.errno == errno.ENOSPC
    line = classify(err.value, "envace train").line()
    assert "no space left on device" in line and str(root) in line
    return msg


def _open_files_under(root: Path) -> list[str]:
    """Files this process holds open under `root` (a removed file held open keeps its space)."""
    out = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(str(root)):
            out.append(target)
    return out


def _leftovers(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir()) if root.exists() else []


def test_the_estimate_is_the_tensor_bytes_plus_a_margin(trained):
    model, _, opt = trained
    weights = sum(t.numel() * t.element_size() for t in model.state_dict().values())
    states = sum(v.numel() * v.element_size() for s in opt.state.values() for v in s.values()
                 if torch.is_tensor(v))
    assert states >= 2 * sum(p.numel() * p.element_size() for p in model.parameters())  # Adam: two moments
    assert checkpoint_bytes({"policy": model}, {"policy": opt}) == weights + states + SLACK_BYTES


def test_a_disk_already_too_small_is_refused_before_writing(trained, tmpfs):
    model, tok, opt = trained
    root = tmpfs(1 << 20) / "checkpoints"
    needed = checkpoint_bytes({"policy": model}, {"policy": opt})
    assert needed > 1 << 20
    with pytest.raises(CheckpointWriteError) as err:
        save_checkpoint(root, 1, {"policy": model}, tok, {"policy": opt}, {})
    _says_no_space(err, root, needed)
    assert _leftovers(root) == []


@pytest.mark.parametrize(("size", "writer"), [(150_000, "model.safetensors"), (1 << 20, "optim.pt")])
def test_a_disk_that_fills_mid_write_says_so_on_either_writer(trained, tmpfs, monkeypatch, size, writer):
    model, tok, opt = trained
    root = tmpfs(size) / "checkpoints"
    monkeypatch.setattr(ckpt_mod, "_check_space", lambda *a: None)  # reach the writer, as if the space went later
    needed = checkpoint_bytes({"policy": model}, {"policy": opt})
    with pytest.raises(CheckpointWriteError) as err:
        save_checkpoint(root, 1, {"policy": model}, tok, {"policy": opt}, {})
    msg = _says_no_space(err, root, needed)
    assert writer in msg  # the file being written when the disk filled
    assert _leftovers(root) == []  # no .tmp_step_* folder
    assert _open_files_under(root) == []  # nor a removed file still holding its space


@pytest.mark.parametrize("error", [
    "safetensors",  # what safetensors raised on the full tmpfs
    "torch",  # what torch's zip writer raised there
    "oserror",
])
def test_without_root_the_writers_errors_on_a_full_disk_are_classified(trained, tmp_path, monkeypatch, error):
    model, tok, opt = trained
    root = tmp_path / "checkpoints"
    monkeypatch.setattr(ckpt_mod, "free_bytes", lambda path: 4096)  # the disk is full once writing starts ...
    monkeypatch.setattr(ckpt_mod, "_check_space", lambda *a: None)  # ... not before

    def fail(*args, **kwargs):
        if error == "safetensors":
            from safetensors import SafetensorError

            raise SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")
        if error == "torch":
            raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 499456 vs 499408")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(ckpt_mod, "save_model" if error == "safetensors" else "_save_optimizers", fail)
    with pytest.raises(CheckpointWriteError) as err:
        save_checkpoint(root, 1, {"policy": model}, tok, {"policy": opt}, {})
    _says_no_space(err, root, checkpoint_bytes({"policy": model}, {"policy": opt}))
    assert _leftovers(root) == []
