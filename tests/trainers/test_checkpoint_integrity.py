"""Damaged checkpoints: resume falls back to the newest intact checkpoint, says which one
it skipped and why, and names the file when none is intact. Checkpoint writes stay atomic."""

from __future__ import annotations

import json
import os
import warnings

import pytest
import torch

from envace.models.loading import load_policy
from envace.trainers.checkpoint import (
    CorruptCheckpointError,
    latest_checkpoint,
    list_checkpoints,
    load_optimizer_states,
    save_checkpoint,
)


@pytest.fixture
def two_checkpoints(tiny_model_dir, tmp_path):
    """step_000001 and step_000002 of the tiny model with a real AdamW state (one optimizer step each)."""
    model, tok = load_policy(tiny_model_dir)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    root = tmp_path / "checkpoints"
    for step in (1, 2):
        loss = model(input_ids=torch.tensor([[1, 2, 3, 4]]), labels=torch.tensor([[1, 2, 3, 4]])).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
        save_checkpoint(root, step, {"policy": model}, tok, {"policy": opt},
                        {"config": {"tracking": {"store_url": "postgresql://u:PASSWORD@h/db"}}}, keep=5)
    return root


def _truncate(path, keep_fraction: float = 0.5) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep_fraction)])


@pytest.mark.parametrize("victim", ["policy/model.safetensors", "optim.pt", "meta.json"])
def test_truncated_newest_checkpoint_falls_back_to_the_previous_one(two_checkpoints, victim):
    root = two_checkpoints
    assert [c.step for c in list_checkpoints(root)] == [1, 2]
    _truncate(root / "step_000002" / victim)
    with pytest.warns(UserWarning) as caught:
        ckpt = latest_checkpoint(root)
    assert ckpt is not None and ckpt.step == 1
    [w] = [str(w.message) for w in caught]
    assert "step_000002" in w and victim.split("/")[-1] in w and "step_000001" in w
    assert [c.step for c in list_checkpoints(root)] == [1]
    # the fallback really loads: its optimizer state goes into a fresh optimizer
    model, _ = load_policy(ckpt.model_dir("policy"))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    load_optimizer_states(ckpt, {"policy": opt})
    assert all(s["step"].item() == 1 for s in opt.state_dict()["state"].values())


def test_same_size_damage_inside_optim_pt_is_caught_by_its_crc(two_checkpoints):
    path = two_checkpoints / "step_000002" / "optim.pt"
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF  # one flipped byte in the middle of a stored record; the size is unchanged
    path.write_bytes(bytes(data))
    with pytest.warns(UserWarning, match=r"step_000002.*optim\.pt"):
        assert latest_checkpoint(two_checkpoints).step == 1


def test_no_intact_checkpoint_is_a_clear_error_naming_the_file(two_checkpoints):
    _truncate(two_checkpoints / "step_000002" / "meta.json")
    _truncate(two_checkpoints / "step_000001" / "policy" / "model.safetensors")
    with pytest.raises(CorruptCheckpointError) as err:
        latest_checkpoint(two_checkpoints)
    msg = str(err.value)
    assert str(two_checkpoints / "step_000002" / "meta.json") in msg
    assert str(two_checkpoints / "step_000001" / "policy" / "model.safetensors") in msg
    assert "no intact checkpoint" in msg


def test_empty_root_has_no_checkpoint(tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert latest_checkpoint(tmp_path / "none") is None


def test_meta_lists_every_file_with_its_size_and_masks_secrets(two_checkpoints):
    step = two_checkpoints / "step_000002"
    meta = json.loads((step / "meta.json").read_text())
    on_disk = {p.relative_to(step).as_posix(): p.stat().st_size for p in step.rglob("*")
               if p.is_file() and p.name != "meta.json"}
    assert meta["files"] == on_disk and "optim.pt" in on_disk and "policy/model.safetensors" in on_disk
    assert "PASSWORD" not in (step / "meta.json").read_text()
    assert meta["config"]["tracking"]["store_url"] == "postgresql://u:***@h/db"


def test_resaving_a_step_replaces_it_and_leaves_no_temporary_dirs(tiny_model_dir, two_checkpoints):
    model, tok = load_policy(tiny_model_dir)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    _truncate(two_checkpoints / "step_000002" / "optim.pt")
    save_checkpoint(two_checkpoints, 2, {"policy": model}, tok, {"policy": opt}, {}, keep=5)
    assert [c.step for c in list_checkpoints(two_checkpoints)] == [1, 2]
    assert sorted(os.listdir(two_checkpoints)) == ["step_000001", "step_000002"]


def test_training_resumes_from_the_intact_checkpoint_when_the_newest_is_damaged(tiny_model_dir, tmp_path):
    """The embedded trainer end to end: steps 1-2 checkpointed, step 2's weights cut short, a restart to
    step 3 warns, re-runs step 2 from step 1's checkpoint and stores every step's trajectories once."""
    import sqlalchemy as sa

    from envace.trainers.config import TrainConfig
    from envace.trainers.embedded import train

    def cfg(steps: int) -> TrainConfig:
        return TrainConfig.model_validate({
            "model": str(tiny_model_dir), "out_dir": str(tmp_path / "run"), "steps": steps, "save_every": 1,
            "keep_checkpoints": 3, "prompts_per_step": 1, "k": 2, "threads": 1, "progress": False,
            "data": {"n_tasks": 10}, "tracking": {"mlflow_uri": f"sqlite:///{tmp_path / 'mlflow.db'}"},
            "rollout": {"max_assistant_turns": 1, "act": {"max_new_tokens": 8}, "rehearse": {"max_new_tokens": 8}}})

    first = train(cfg(2))
    _truncate(tmp_path / "run" / "checkpoints" / "step_000002" / "policy" / "model.safetensors")
    with pytest.warns(UserWarning, match=r"step_000002.*model\.safetensors.*step_000001"):
        again = train(cfg(3))
    assert [h["step"] for h in again.history] == [2, 3]  # step 2 re-run from step 1's checkpoint
    assert again.mlflow_run_id == first.mlflow_run_id  # the same MLflow run continues
    assert [c.step for c in list_checkpoints(tmp_path / "run" / "checkpoints")] == [1, 2, 3]
    engine = sa.create_engine(f"sqlite:///{tmp_path / 'run' / 'store.db'}")
    with engine.connect() as c:
        steps = sorted(r[0] for r in c.execute(sa.text("SELECT step FROM trajectories")))
    engine.dispose()
    assert steps == [1, 1, 2, 2, 3, 3]


class _FailingAdamW(torch.optim.AdamW):
    """An optimizer whose state cannot be saved (a full disk, an I/O error): the save dies after the models
    were written into the temporary directory."""

    def state_dict(self):
        raise OSError("No space left on device")


def test_a_save_that_dies_midway_leaves_no_step_directory(tiny_model_dir, two_checkpoints):
    model, tok = load_policy(tiny_model_dir)
    with pytest.raises(OSError, match="(?i)no space left on device"):
        save_checkpoint(two_checkpoints, 3, {"policy": model}, tok,
                        {"policy": _FailingAdamW(model.parameters(), lr=1e-3)}, {}, keep=5)
    assert not (two_checkpoints / "step_000003").exists()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the half-written temporary directory is not a damaged checkpoint
        assert latest_checkpoint(two_checkpoints).step == 2
    save_checkpoint(two_checkpoints, 3, {"policy": model}, tok,
                    {"policy": torch.optim.AdamW(model.parameters(), lr=1e-3)}, {}, keep=5)
    assert sorted(os.listdir(two_checkpoints)) == ["step_000001", "step_000002", "step_000003"]
