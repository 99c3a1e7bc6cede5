"""scripts/gpu_evidence.sh dry-run on CPU (toy sizes, the same stages and code as on a GPU), its
preflight failing the run, the carried-wheel size check, and the verl-shaped log-prob formulas of the
logits probe against verl's own functions. The dry run's verl_memory stage drives verl's own FSDP worker
(with the stage's import-only ray) and its micro-batches are checked against envace's memory estimate."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
STAGES = ["preflight", "parity", "embedded_rl", "engines", "logits_probe", "verl_memory"]
GZIPPED_LOGS = {"verl_memory"}


def _run(cmd, **env):
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900,
                          env={**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
                               "PYTHON": sys.executable, "ENVACE_WHEELS": "/nonexistent", **env})


@pytest.mark.slow
def test_dry_run_writes_every_stage(tmp_path):
    out = _run(["bash", "scripts/gpu_evidence.sh", "--dry-run", str(tmp_path / "ev")])
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    summary = json.loads((tmp_path / "ev" / "summary.json").read_text())
    assert summary["status"] == "ok" and summary["dry_run"] is True
    assert list(summary["stages"]) == STAGES
    assert all(s["status"] == "ok" and s["dry_run"] is True for s in summary["stages"].values())
    for stage in STAGES:
        assert (tmp_path / "ev" / "logs" / f"{stage}.log{'.gz' if stage in GZIPPED_LOGS else ''}").is_file()
    st = summary["stages"]
    assert st["preflight"]["checks"]["nvidia-smi"] == "not run (dry run on CPU)" and not st["preflight"]["failures"]
    assert [line.split(":")[0] for line in st["parity"]["lines"]] == [
        "PASS log-prob parity CPU vs CPU at T=1.0", "PASS log-prob parity CPU vs CPU at T=0.01",
        "PASS advantage parity CPU vs CPU (role-wise GRPO)"]
    assert st["embedded_rl"]["steps"] == 3 and st["embedded_rl"]["s_per_step_incl_setup"] > 0
    eng = st["engines"]
    assert eng["fast"]["tokens"] == eng["hf"]["tokens"] == eng["requests"] * eng["new_tokens"]
    assert 0 <= eng["identical_share_fast_vs_hf"] <= 1 and eng["packed_update"]["fwd_bwd_s"] > 0
    assert [p["tokens"] for p in st["logits_probe"]["points"]] == [64, 128]
    assert all(p["finite"] for p in st["logits_probe"]["points"])
    check_verl_memory(st["verl_memory"], tmp_path / "ev" / "logs" / "verl_memory.log.gz")


def check_verl_memory(vm, log):
    """verl's worker ran both cases; the micro-batches verl formed are the ones envace's estimator assumes."""
    assert vm["mix_tokens"] == [60, 12, 4, 4] and vm["temperatures"] == [1.0, 0.01, 1.0, 1.0]
    assert vm["model"]["vocab_size"] == 512 and vm["model"]["num_hidden_layers"] == 2 and vm["model"]["params"] > 0
    rows, capped = vm["cases"]["rows"], vm["cases"]["token_cap"]
    assert rows["verl"]["use_dynamic_bsz"] is False and capped["verl"]["use_dynamic_bsz"] is True
    for case in (rows, capped):
        assert case["fp32_temperature_division"] is True
        assert case["verl"]["use_remove_padding"] is False and case["verl"]["attn_implementation"] == "sdpa"
        assert case["verl"]["ppo_max_token_len_per_gpu"] == 80  # the dry run's max_model_len: the launcher's cap
        for phase in ("old log-probs", "update"):
            got, est = case["phases"][phase], case["estimate"][phase]
            assert got["outcome"] == "ok"
            assert {"s", "start_gb", "peak_gb", "above_start_gb"} <= set(got)  # GPU numbers; None on CPU
            assert est["bytes"] > 0 and est["line"].startswith(phase)
            # the largest micro-batch verl's worker formed = the estimator's worst micro-batch
            assert max(r * t for r, t in got["micro_batches"]) == est["micro_batch"]["padded_tokens"]
    # one row per micro-batch (the padding bound) against all four rows padded to the longest
    assert sorted(rows["phases"]["old log-probs"]["micro_batches"]) == [[1, 4], [1, 4], [1, 12], [1, 60]]
    assert capped["phases"]["old log-probs"]["micro_batches"] == [[4, 60]]
    assert capped["phases"]["update"]["micro_batches"] == [[4, 60]]
    assert rows["phases"]["update"]["pg_loss_finite"] and capped["phases"]["update"]["pg_loss_finite"]
    assert capped["estimate"]["old log-probs"]["bytes"] > 3 * rows["estimate"]["old log-probs"]["bytes"]
    text = gzip.decompress(log.read_bytes()).decode()
    assert "token_cap: update: ok" in text and "vs estimate" in text


def test_preflight_failure_fails_the_run_and_stops_it(tmp_path):
    out = _run(["bash", "scripts/gpu_evidence.sh", "--dry-run", str(tmp_path / "ev")],
               ENVACE_EVIDENCE_REQUIRE="envace_no_such_module")
    assert out.returncode == 1, out.stdout + out.stderr
    summary = json.loads((tmp_path / "ev" / "summary.json").read_text())
    assert summary["status"] == "fail" and summary["note"] == "preflight failed: no other stage ran"
    (failure,) = summary["stages"]["preflight"]["failures"]
    assert failure.startswith("import envace_no_such_module: ModuleNotFoundError")
    assert [summary["stages"][s]["status"] for s in STAGES[1:]] == ["not run"] * (len(STAGES) - 1)


def test_missing_interpreter_fails(tmp_path):
    out = _run(["bash", "scripts/gpu_evidence.sh", "--dry-run", str(tmp_path / "ev")], PYTHON="/nonexistent/python")
    assert out.returncode == 1 and "FAIL: python interpreter" in out.stdout
    assert json.loads((tmp_path / "ev" / "summary.json").read_text())["status"] == "fail"


def test_carried_wheel_total_is_checked(tmp_path):
    small = tmp_path / "small"
    small.mkdir()
    (small / "a-1-py3-none-any.whl").write_bytes(b"x" * 1024)
    ok = _run(["bash", "scripts/gpu_evidence_wheels.sh", "--check", str(small)])
    assert ok.returncode == 0 and "0.00 MiB" in ok.stdout and ": ok" in ok.stdout
    big = tmp_path / "big"
    big.mkdir()
    with open(big / "b-1-py3-none-any.whl", "wb") as f:  # 64 MiB + 1 byte, sparse
        f.truncate(64 * 1048576 + 1)
    over = _run(["bash", "scripts/gpu_evidence_wheels.sh", "--check", str(big)])
    assert over.returncode == 1 and "FAIL: carried wheels are 64.00 MiB" in over.stdout


@pytest.mark.verl
def test_probe_formulas_are_verls(verl_api):
    import torch
    from verl.utils import torch_functional as verl_f

    from envace.trainers.verl.logits import entropy_from_logits, logprobs_from_logits, scale_logits_fp32

    gen = torch.Generator().manual_seed(0)
    logits = (torch.randn(64, 512, generator=gen) * 2).to(torch.bfloat16)
    labels = torch.randint(0, 512, (64,), generator=gen)
    scaled = scale_logits_fp32(logits, torch.full((64, 1), 0.5), is_unit_temperature=False)
    assert scaled.dtype == torch.float32
    assert torch.allclose(logprobs_from_logits(scaled, labels), verl_f.logprobs_from_logits(scaled, labels), atol=1e-5)
    assert torch.allclose(entropy_from_logits(scaled), verl_f.entropy_from_logits(scaled), atol=1e-4)
