"""scripts/gpu_smoke.sh on a CPU-only machine: a clear "no GPU: skipped" line and exit 0, but exit 1 when
the interpreter or torch is missing (a broken install is not a skip); no global `ray stop`; and the pieces
its GPU tiers run, exercised here on CPU (the parity script against CPU as the second device, the 2-step
verl config through the launcher's dry run)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _run(cmd, **env):
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "OMP_NUM_THREADS": "1", **env})


def test_no_gpu_skips_cleanly():
    out = _run(["bash", "scripts/gpu_smoke.sh"], CUDA_VISIBLE_DEVICES="", PYTHON=sys.executable)
    assert out.returncode == 0, out.stdout + out.stderr
    (line,) = [x for x in out.stdout.splitlines() if x.startswith("no GPU: skipped")]
    assert "torch.cuda.is_available() is False" in line
    assert "checked:" not in out.stdout  # nothing is claimed


def test_missing_interpreter_is_a_failure():
    out = _run(["bash", "scripts/gpu_smoke.sh"], PYTHON="/nonexistent/bin/python")
    assert out.returncode == 1, out.stdout + out.stderr
    assert "FAIL: python interpreter '/nonexistent/bin/python' not found" in out.stdout
    assert "no GPU: skipped" not in out.stdout


def test_missing_torch_is_a_failure(tmp_path):
    # an interpreter whose `import torch` fails (torch blocked in sys.modules), running the script's stdin
    fake = tmp_path / "python"
    fake.write_text(f"#!/bin/sh\nexec {sys.executable} -c 'import sys; sys.modules[\"torch\"] = None; "
                    "exec(compile(sys.stdin.read(), \"<stdin>\", \"exec\"))'\n")
    fake.chmod(0o755)
    out = _run(["bash", "scripts/gpu_smoke.sh"], PYTHON=str(fake))
    assert out.returncode == 1, out.stdout + out.stderr
    (line,) = [x for x in out.stdout.splitlines() if x.startswith("FAIL")]
    assert "torch does not import" in line and "ModuleNotFoundError" in line
    assert "no GPU: skipped" not in out.stdout


def test_gpu_required_turns_the_skip_into_a_failure():
    out = _run(["bash", "scripts/gpu_smoke.sh"], CUDA_VISIBLE_DEVICES="", PYTHON=sys.executable, ENVACE_REQUIRE_GPU="1")
    assert out.returncode == 1 and "FAIL: torch" in out.stdout and "no CUDA device" in out.stdout


def test_no_global_ray_stop():
    script = (ROOT / "scripts" / "gpu_smoke.sh").read_text()
    commands = [line.split("#")[0] for line in script.splitlines()]
    assert not [c for c in commands if "ray stop" in c or "scripts stop" in c]  # ends only its own head
    assert "--block" in script and 'kill -TERM -- -"$ray_pid"' in script


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    from envace.models.corpus import world_corpus
    from envace.models.tiny import TinyModelConfig, init_tiny_model

    cfg = TinyModelConfig(hidden_size=32, num_layers=1, num_heads=2, num_kv_heads=1, head_dim=16,
                          intermediate_size=64, vocab_size=350, seed=0)
    return init_tiny_model(world_corpus(20, seed=0), tmp_path_factory.mktemp("smoke") / "tiny", cfg)


def test_parity_script_runs(tiny_dir, tmp_path):
    out = _run([sys.executable, "scripts/gpu_smoke.py", "parity", str(tmp_path), str(tiny_dir), "cpu"])
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    assert [x.split(":")[0] for x in lines if x.startswith(("PASS", "FAIL"))] == [
        "PASS log-prob parity CPU vs CPU at T=1.0", "PASS log-prob parity CPU vs CPU at T=0.01",
        "PASS advantage parity CPU vs CPU (role-wise GRPO)"]


@pytest.mark.verl
def test_verl_smoke_config_composes(tiny_dir, tmp_path, parquet_path):
    cfg = _run([sys.executable, "scripts/gpu_smoke.py", "verl-config", str(tmp_path), str(tiny_dir),
                str(parquet_path)])
    assert cfg.returncode == 0, cfg.stderr
    out = _run([sys.executable, "-m", "envace.cli", "train", "--backend", "verl", cfg.stdout.strip(), "--dry-run"])
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    assert "trainer.total_training_steps=2" in out.stdout
    assert "total_training_steps: 2" in out.stdout  # verl's composed config
    assert "+envace.rehearse.temperature=0.01" in out.stdout
