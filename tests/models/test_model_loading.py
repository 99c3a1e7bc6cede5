"""load_policy: any local HF dir, offline, with errors that name the path and the fix."""

from __future__ import annotations

import json
import os

import pytest
import torch

from envace.models.loading import ModelDirError, load_policy, pick_device


def test_loads_tiny_dir(tiny_dir):
    model, tok = load_policy(tiny_dir, device="cpu")
    assert os.environ["HF_HUB_OFFLINE"] == "1"
    assert not model.training and model.dtype == torch.float32 and model.device.type == "cpu"
    assert tok.decode(tok.encode("a  b 12", add_special_tokens=False)) == "a  b 12"
    model16, _ = load_policy(tiny_dir, device="cpu", dtype="bfloat16")
    assert model16.dtype == torch.bfloat16


def test_pick_device_matches_cuda_availability():
    assert pick_device().type == ("cuda" if torch.cuda.is_available() else "cpu")


def test_bad_dirs_are_explained(tmp_path, tiny_dir):
    with pytest.raises(ModelDirError, match=f"{tmp_path / 'nope'} is not a directory; build one with"):
        load_policy(tmp_path / "nope")
    with pytest.raises(ModelDirError, match="has no config.json"):
        load_policy(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "qwen3"}))
    with pytest.raises(ModelDirError, match="no weights"):
        load_policy(tmp_path)
    with pytest.raises(ValueError, match="not a torch dtype"):
        load_policy(tiny_dir, dtype="float99")
