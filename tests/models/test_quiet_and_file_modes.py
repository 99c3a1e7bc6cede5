"""Library progress bars and info logs are silenced wherever envace loads or saves a model (the demo's
output was buried under transformers' "Loading weights" / "Writing model shards" bars), envace's own bars
stay, and saved model files get the umask's mode (safetensors writes 0600 through a private temp file)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

LIBRARY_BARS = ("Loading weights", "Writing model shards")


def _run(code: str, cwd, **env_extra) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items()
           if k not in ("HF_HUB_DISABLE_PROGRESS_BARS", "TRANSFORMERS_VERBOSITY", "MLFLOW_LOGGING_LEVEL")}
    env.update(OMP_NUM_THREADS="1", **env_extra)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=600)


def test_transformers_shows_the_bars_without_envace(tiny_dir, tmp_path):
    """Control: the plain transformers calls print both bars here, so the test below can fail."""
    res = _run(f"""
        from transformers import AutoModelForCausalLM
        m = AutoModelForCausalLM.from_pretrained({str(tiny_dir)!r})
        m.save_pretrained({str(tmp_path / 'plain')!r})
        """, tmp_path)
    assert res.returncode == 0, res.stderr
    assert all(bar in res.stderr for bar in LIBRARY_BARS)


def test_envace_load_and_save_are_quiet_and_keep_own_bars(tiny_dir, tmp_path):
    res = _run(f"""
        from tqdm.auto import tqdm
        from envace.models.loading import load_policy, save_model
        model, tok = load_policy({str(tiny_dir)!r}, device="cpu")
        save_model(model, tok, {str(tmp_path / 'saved')!r})
        for _ in tqdm(range(3), desc="envace-own-stage"):
            pass
        """, tmp_path)
    assert res.returncode == 0, res.stderr
    assert not any(bar in res.stderr for bar in LIBRARY_BARS), res.stderr
    assert "envace-own-stage" in res.stderr  # our own bar is still drawn


@pytest.mark.parametrize("mask", [0o022, 0o027])
def test_saved_model_files_follow_the_umask(tiny_dir, tmp_path, mask):
    from envace.models.loading import load_policy, save_model

    model, tok = load_policy(tiny_dir, device="cpu")
    old = os.umask(mask)
    try:
        out = save_model(model, tok, tmp_path / "m")
    finally:
        os.umask(old)
    modes = {p.name: os.stat(p).st_mode & 0o777 for p in out.iterdir() if p.is_file()}
    assert "model.safetensors" in modes
    assert modes == {name: 0o666 & ~mask for name in modes}  # what open(path, "w") gives: 0644 / 0640
