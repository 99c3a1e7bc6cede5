"""Sweep SFT prerequisites: built once, reused while spec and code are unchanged, rebuilt otherwise."""

from __future__ import annotations

import json

import pytest

from envace.sweeps.prepare import KEY_FILE, SFTSpec, build_sft, is_built, sft_key

TOY = {"corpus_tasks": 12, "sft_tasks": 12, "steps": 2,
       "tiny": {"hidden_size": 32, "num_layers": 1, "num_heads": 2, "num_kv_heads": 1, "head_dim": 16,
                "intermediate_size": 64, "vocab_size": 400}}


@pytest.fixture(autouse=True)
def pinned_code_version(monkeypatch):
    monkeypatch.setenv("ENVACE_CODE_VERSION", "pinned-for-test")


def test_build_then_reuse_then_rebuild_on_a_changed_spec(tmp_path):
    spec = SFTSpec(out=str(tmp_path / "sft"), **TOY)
    assert not is_built(spec)
    first = build_sft(spec)
    assert first["cached"] is False and (spec.model_dir() / "config.json").is_file()
    assert json.loads((spec.model_dir() / "config.json").read_text())["hidden_size"] == 32
    weights = next(spec.model_dir().glob("*.safetensors"))
    mtime = weights.stat().st_mtime_ns
    again = build_sft(spec)
    assert again["cached"] is True and again["key"] == first["key"]
    assert weights.stat().st_mtime_ns == mtime  # not rewritten
    changed = SFTSpec(out=spec.out, **{**TOY, "steps": 3})
    assert sft_key(changed) != first["key"] and not is_built(changed)
    third = build_sft(changed)
    assert third["cached"] is False and (tmp_path / "sft" / KEY_FILE).read_text().strip() == sft_key(changed)


def test_a_build_without_its_key_file_is_rebuilt(tmp_path, monkeypatch):
    spec = SFTSpec(out=str(tmp_path / "sft"), **TOY)
    build_sft(spec)
    (tmp_path / "sft" / KEY_FILE).unlink()  # as after a crash mid-build
    assert not is_built(spec)
    monkeypatch.setenv("ENVACE_CODE_VERSION", "other-code")
    assert build_sft(SFTSpec(out=spec.out, **TOY))["cached"] is False


@pytest.mark.parametrize("builds, workers, cpus, want", [(2, 2, 2, 1), (1, 2, 2, 2), (2, 1, 2, 2), (3, 2, 16, 8),
                                                         (4, 4, 2, 1)])
def test_parallel_builds_split_the_cores(builds, workers, cpus, want):
    from envace.sweeps.prepare import parallel_threads

    assert parallel_threads(builds, workers, cpus) == want


def test_threads_run_the_build_without_entering_its_key(tmp_path, monkeypatch):
    import torch

    import envace.trainers.sft as sft_mod

    seen = []
    real = sft_mod.sft
    monkeypatch.setattr(sft_mod, "sft", lambda cfg: (seen.append(cfg.threads), real(cfg))[1])
    before = torch.get_num_threads()
    try:
        spec = SFTSpec(out=str(tmp_path / "sft"), **TOY)
        info = build_sft(spec, threads=1)
        assert seen == [1] and info["key"] == sft_key(spec)
        assert build_sft(spec, threads=2)["cached"] is True  # same key whatever the threads
    finally:
        torch.set_num_threads(before)
