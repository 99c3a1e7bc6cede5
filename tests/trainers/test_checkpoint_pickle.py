"""Loading a checkpoint never executes code from it. Checkpoints come from shared storage and from colleagues,
so every file a resume reads gets a pickle payload in turn (one that would create a marker file when
unpickled); resume must refuse the checkpoint with one line naming the file, and the marker must not exist.

The payload is `exec(...)` via `__reduce__`, the classic pickle gadget; `weights_only=True` unpicklers and
safetensors / JSON parsers never call it."""

from __future__ import annotations

import json
import pickle

import pytest
import torch

from envace.models.loading import ModelDirError, load_policy
from envace.trainers.checkpoint import CorruptCheckpointError, latest_checkpoint, load_optimizer_states, save_checkpoint


class _Payload:
    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (exec, (f"open({self.marker!r}, 'w').write('pwned')",))


def _pickle_bytes(marker) -> bytes:
    return pickle.dumps({"state": _Payload(marker)})


def _torch_payload(path, marker) -> None:
    """A torch.save archive that loads as a valid optimizer state and also carries the payload."""
    real = path.parent / "optim.pt" if (path.parent / "optim.pt").is_file() else path.parent.parent / "optim.pt"
    states = torch.load(real, map_location="cpu", weights_only=True)
    states["policy"]["param_groups"][0]["note"] = _Payload(marker)
    torch.save(states, path)


@pytest.fixture
def checkpoint(tiny_model_dir, tmp_path):
    model, tok = load_policy(tiny_model_dir)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loss = model(input_ids=torch.tensor([[1, 2, 3, 4]]), labels=torch.tensor([[1, 2, 3, 4]])).loss
    loss.backward()
    opt.step()
    root = tmp_path / "checkpoints"
    save_checkpoint(root, 1, {"policy": model}, tok, {"policy": opt}, {"config": {}}, keep=2)
    return root


def _reseal(step_dir) -> None:
    """Update meta.json's size manifest as an attacker would, so the size check alone cannot catch it."""
    meta_path = step_dir / "meta.json"
    meta = json.loads(meta_path.read_text())
    meta["files"] = {rel: (step_dir / rel).stat().st_size for rel in meta["files"] if (step_dir / rel).is_file()}
    meta_path.write_text(json.dumps(meta))


def _resume(root):
    """What `envace train` does on restart (envace.trainers.embedded.train): newest intact checkpoint,
    its model dir, its optimizer state."""
    ckpt = latest_checkpoint(root)
    model, _ = load_policy(ckpt.model_dir("policy"))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    load_optimizer_states(ckpt, {"policy": opt})
    return ckpt


# (file in the step dir, how the payload gets there); every file `_resume` opens
VICTIMS = {
    "optim.pt": lambda p, m: _torch_payload(p, m),
    "policy/model.safetensors": lambda p, m: p.write_bytes(_pickle_bytes(m)),
    "policy/pytorch_model.bin": lambda p, m: (_torch_payload(p, m), (p.parent / "model.safetensors").unlink()),
    "policy/training_args.bin": lambda p, m: _torch_payload(p, m),
    "policy/config.json": lambda p, m: p.write_bytes(_pickle_bytes(m)),
    "policy/generation_config.json": lambda p, m: p.write_bytes(_pickle_bytes(m)),
    "policy/tokenizer.json": lambda p, m: p.write_bytes(_pickle_bytes(m)),
    "policy/tokenizer_config.json": lambda p, m: p.write_bytes(_pickle_bytes(m)),
}


@pytest.mark.parametrize("victim", sorted(VICTIMS))
def test_a_pickle_payload_in_any_checkpoint_file_never_runs(checkpoint, tmp_path, victim):
    marker = tmp_path / "PWNED"
    step_dir = checkpoint / "step_000001"
    VICTIMS[victim](step_dir / victim, marker)
    _reseal(step_dir)
    try:
        _resume(checkpoint)
        error = None
    except (CorruptCheckpointError, ModelDirError) as exc:
        error = exc
    assert not marker.exists(), f"unpickling {victim} ran the payload"
    assert error is not None, f"a checkpoint with a pickle payload in {victim} was accepted"
    msg = str(error)
    assert "\n" not in msg
    assert victim.split("/")[-1] in msg or str(step_dir / victim) in msg, msg


def test_meta_json_as_a_pickle_is_refused_without_running_it(checkpoint, tmp_path):
    marker = tmp_path / "PWNED"
    (checkpoint / "step_000001" / "meta.json").write_bytes(_pickle_bytes(marker))
    with pytest.raises(CorruptCheckpointError, match="meta.json"):
        latest_checkpoint(checkpoint)
    assert not marker.exists()


def test_an_intact_checkpoint_still_resumes(checkpoint):
    ckpt = _resume(checkpoint)
    assert ckpt.step == 1
