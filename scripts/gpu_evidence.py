"""GPU evidence stages behind scripts/gpu_evidence.sh (run that, not this): one JSON section per stage.

`python scripts/gpu_evidence.py STAGE OUT_JSON [--dry-run]`; every stage writes {"status": "ok"|"fail", ...}
and exits 1 on "fail". `--dry-run` runs the same code on CPU at small sizes (the test of the script); its
numbers are CPU numbers of toy shapes and say so (`"dry_run": true`).

Stages:
- preflight: nvidia-smi, versions, the imports the embedded path needs; any failure fails the stage.
- parity: the tiny model's log-probs on CPU vs CUDA at T 1.0 and 0.01 (scripts/gpu_smoke.py's check).
- embedded_rl: 3 embedded RL steps of the tiny model on CUDA (wall s / step including setup, peak GB).
- engines: a random-init Qwen3-0.6B-shaped model in bf16: the fast engine vs HFEngine vs model.generate
  on 32 requests x 512 prompt x 128 new tokens, greedy (tokens/s, identical-sequence share, max |d log-prob|
  over the common prefix), and forward+backward of the packed update on 8 x 2048 tokens (s, peak GB).
- logits_probe: an 8B-sized LM head (4096 x 151936, bf16) at growing token counts, verl-shaped: logits,
  per-row temperature division (envace's fp32 division), log-softmax gather and entropy; peak GB per
  count and the first count that runs out of memory.
- verl_memory: verl's own FSDP actor on a Qwen3-8B-shaped 2-layer model, old log-probs and one update of an
  EnvACE row mix, with and without envace's padding bound: peak GB or out-of-memory per phase, next to envace's
  memory estimate (scripts/gpu_evidence_verl.py).
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

# the GPU machine's missing imports (carried as wheels) and envace's modules on the embedded path
REQUIRED_IMPORTS = ["pydantic", "pydantic_core", "annotated_types", "typing_inspection", "omegaconf", "antlr4",
                    "orjson", "transformers", "accelerate", "envace", "envace.trainers.embedded",
                    "envace.engines.fast", "envace.trainers.packing", "envace.trainers.packed_readout"]


def _device(dry: bool) -> str:
    return "cpu" if dry else "cuda"


def _sync(device: str) -> None:
    import torch

    if device == "cuda":
        torch.cuda.synchronize()


def _peak_gb(device: str) -> float | None:
    import torch

    return round(torch.cuda.max_memory_allocated() / 2**30, 3) if device == "cuda" else None


def _reset_peak(device: str) -> None:
    import torch

    if device == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def preflight(dry: bool, extra: list[str]) -> dict[str, Any]:
    import importlib

    out: dict[str, Any] = {"python": platform.python_version(), "checks": {}}
    failed = []
    if dry:
        out["checks"]["nvidia-smi"] = "not run (dry run on CPU)"
    else:
        try:
            query = ["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"]
            smi = subprocess.run(query, capture_output=True, text=True, timeout=20)
            out["checks"]["nvidia-smi"] = smi.stdout.strip() or smi.stderr.strip()
            if smi.returncode != 0:
                failed.append(f"nvidia-smi exit {smi.returncode}")
        except (OSError, subprocess.TimeoutExpired) as exc:
            failed.append(f"nvidia-smi: {exc}")
    for name in REQUIRED_IMPORTS + extra:
        try:
            module = importlib.import_module(name)
            out["checks"][name] = str(getattr(module, "__version__", "ok"))
        except Exception as exc:  # noqa: BLE001 - reported, and it fails the stage
            failed.append(f"import {name}: {type(exc).__name__}: {exc}")
    try:
        import torch

        out["torch"] = torch.__version__
        out["cuda"] = torch.version.cuda
        if not dry:
            if not torch.cuda.is_available():
                failed.append("torch.cuda.is_available() is False")
            else:
                out["gpu"] = torch.cuda.get_device_name(0)
                out["gpu_memory_gb"] = round(torch.cuda.get_device_properties(0).total_memory / 2**30, 1)
                out["bf16"] = torch.cuda.is_bf16_supported()
    except Exception as exc:  # noqa: BLE001
        failed.append(f"torch: {type(exc).__name__}: {exc}")
    out["failures"] = failed
    out["status"] = "fail" if failed else "ok"
    return out


def _tiny_model(work: Path, dry: bool) -> Path:
    from envace.models.corpus import world_corpus
    from envace.models.tiny import TinyModelConfig, init_tiny_model

    path = work / "tiny"
    if not (path / "config.json").is_file():
        cfg = TinyModelConfig(hidden_size=32, num_layers=1, num_heads=2, num_kv_heads=1, head_dim=16,
                              intermediate_size=64, vocab_size=350, seed=0) if dry else TinyModelConfig()
        init_tiny_model(world_corpus(20 if dry else 200, seed=0), path, cfg)
    return path


def parity(dry: bool, work: Path) -> dict[str, Any]:
    import contextlib
    import io

    import gpu_smoke

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = gpu_smoke.parity(str(work), str(_tiny_model(work, dry)), _device(dry))
    lines = buf.getvalue().splitlines()
    return {"status": "ok" if rc == 0 else "fail", "lines": lines}


def embedded_rl(dry: bool, work: Path) -> dict[str, Any]:
    from envace.cli import app

    device = _device(dry)
    steps = 3
    _reset_peak(device)
    t0 = time.perf_counter()
    try:
        app(["train", "configs/train/envace.yaml", f"model={_tiny_model(work, dry)}", f"out_dir={work / 'rl'}",
             f"device={device}", f"steps={steps}", "prompts_per_step=2", "k=2", f"save_every={steps}",
             "data.n_tasks=20", "tracking.enabled=false", "progress=false", "rollout.rehearse.temperature=0.01"],
            standalone_mode=False)
    except SystemExit as exc:  # the CLI exits; only a non-zero exit is a failure
        if exc.code not in (0, None):
            raise RuntimeError(f"envace train exited {exc.code}") from exc
    _sync(device)
    wall = time.perf_counter() - t0
    return {"status": "ok", "steps": steps, "wall_s": round(wall, 2),
            "s_per_step_incl_setup": round(wall / steps, 2), "peak_gb": _peak_gb(device)}


class IdTokenizer:
    """Ids in, ids out: the random-init model has no trained tokenizer; the engines need pad / eos and a
    decode (text is not compared here, token ids are)."""

    def __init__(self, vocab: int) -> None:
        # no eos: every request runs to its length in every engine (random weights have no end token)
        self.pad_token_id, self.eos_token_id, self.vocab_size = 0, None, vocab
        self.all_special_ids = [0]

    def decode(self, ids, skip_special_tokens: bool = True) -> str:
        return " ".join(str(int(i)) for i in ids)

    def get_vocab(self) -> dict[str, int]:
        return {}

    def convert_ids_to_tokens(self, token_id):
        return str(int(token_id))

    def convert_tokens_to_ids(self, token):
        return None

    def __len__(self) -> int:
        return self.vocab_size


def _qwen3_0_6b(dry: bool, device: str):
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    shape = dict(hidden_size=1024, intermediate_size=3072, num_hidden_layers=28, num_attention_heads=16,
                 num_key_value_heads=8, head_dim=128, vocab_size=151936, max_position_embeddings=4096)
    if dry:
        shape.update(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                     num_key_value_heads=2, head_dim=16, vocab_size=512)
    torch.manual_seed(0)
    cfg = Qwen3Config(**shape, tie_word_embeddings=True, torch_dtype="bfloat16", attn_implementation="sdpa")
    model = Qwen3ForCausalLM(cfg).to(device=device, dtype=torch.bfloat16).eval()
    model.generation_config.eos_token_id = None  # random weights: run every request to its length
    return model, IdTokenizer(shape["vocab_size"])


def _compare(a, b) -> tuple[float, float]:
    same = sum(x.token_ids == y.token_ids for x, y in zip(a, b)) / len(a)
    diff = 0.0
    for x, y in zip(a, b):
        n = 0
        while n < min(len(x.token_ids), len(y.token_ids)) and x.token_ids[n] == y.token_ids[n]:
            n += 1
        if n:
            diff = max(diff, max(abs(p - q) for p, q in zip(x.logprobs[:n], y.logprobs[:n])))
    return round(same, 4), diff


def engines(dry: bool, work: Path) -> dict[str, Any]:
    import torch

    from envace.engines.base import GenRequest
    from envace.engines.fast import FastEngine
    from envace.engines.hf import HFEngine

    device = _device(dry)
    n, prompt, new = (4, 32, 8) if dry else (32, 512, 128)
    model, tok = _qwen3_0_6b(dry, device)
    gen = torch.Generator().manual_seed(0)
    prompts = [torch.randint(1, tok.vocab_size - 1, (prompt,), generator=gen).tolist() for _ in range(n)]
    reqs = [GenRequest(p, temperature=0.0, top_p=1.0, max_new_tokens=new, seed=i) for i, p in enumerate(prompts)]
    out: dict[str, Any] = {"requests": n, "prompt_tokens": prompt, "new_tokens": new, "dtype": "bfloat16"}
    results = {}
    for name, engine in (("fast", FastEngine(model, tok, device=device, max_batch=n)),
                         ("hf", HFEngine(model, tok, device=device, max_batch=n))):
        engine.generate(reqs[:1])  # warm-up (kernels, allocator)
        _reset_peak(device)
        _sync(device)
        t0 = time.perf_counter()
        results[name] = engine.generate(reqs)
        _sync(device)
        wall = time.perf_counter() - t0
        tokens = sum(len(r.token_ids) for r in results[name])
        out[name] = {"wall_s": round(wall, 3), "tokens": tokens, "tokens_per_s": round(tokens / wall, 1),
                     "peak_gb": _peak_gb(device)}
    ids = torch.tensor(prompts, device=device)
    _sync(device)
    t0 = time.perf_counter()
    with torch.inference_mode():
        seq = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=new,
                             min_new_tokens=new, pad_token_id=tok.pad_token_id)
    _sync(device)
    wall = time.perf_counter() - t0
    gen_ids = seq[:, prompt:].tolist()
    out["model.generate"] = {"wall_s": round(wall, 3), "tokens_per_s": round(n * new / wall, 1)}
    same_fast, dlp = _compare(results["fast"], results["hf"])
    out["identical_share_fast_vs_hf"] = same_fast
    out["max_abs_dlogprob_fast_vs_hf"] = dlp
    out["identical_share_hf_vs_generate"] = round(
        sum(r.token_ids == g for r, g in zip(results["hf"], gen_ids)) / n, 4)
    out["packed_update"] = packed_update(model, tok, dry, device)
    out["status"] = "ok"
    return out


def packed_update(model, tok, dry: bool, device: str) -> dict[str, Any]:
    """Forward + backward of envace's packed update (packed_logprobs) on rows x tokens, bf16."""
    import torch

    from envace.trainers.packed_readout import packed_logprobs
    from envace.trainers.packing import pack_rows
    from envace.types import Role

    rows_n, tokens = (2, 64) if dry else (8, 2048)

    class Row:  # the fields packing reads
        def __init__(self, i: int, ids: list[int]) -> None:
            half = len(ids) // 2
            self.role = Role.ACT if i % 2 == 0 else Role.REHEARSE
            self.prompt_ids, self.response_ids = ids[:half], ids[half:]
            self.old_logprobs = [0.0] * len(self.response_ids)
            self.temperature = 1.0 if i % 2 == 0 else 0.01
            self.prompt_index, self.trajectory_key = i, i

    gen = torch.Generator().manual_seed(1)
    rows = [Row(i, torch.randint(1, tok.vocab_size - 1, (tokens,), generator=gen).tolist()) for i in range(rows_n)]
    model.train()
    model.gradient_checkpointing_enable()
    _reset_peak(device)
    _sync(device)
    t0 = time.perf_counter()
    out = packed_logprobs(model, pack_rows(rows), rows, tok.pad_token_id)
    loss = -(out.logprobs.float().sum())
    loss.backward()
    _sync(device)
    wall = time.perf_counter() - t0
    model.zero_grad(set_to_none=True)
    model.eval()
    return {"rows": rows_n, "tokens_per_row": tokens, "fwd_bwd_s": round(wall, 3), "peak_gb": _peak_gb(device),
            "gradient_checkpointing": True}


def logits_probe(dry: bool, work: Path) -> dict[str, Any]:
    """verl's log-prob step on an 8B-sized head: logits, fp32 temperature division, gather + entropy."""
    import torch

    from envace.trainers.verl.logits import entropy_from_logits, logprobs_from_logits, scale_logits_fp32

    device = _device(dry)
    hidden, vocab = (64, 512) if dry else (4096, 151936)
    counts = [64, 128] if dry else [1024, 2048, 4096, 8192, 16384, 20000, 32768, 49152]
    gen = torch.Generator(device=device).manual_seed(0)
    head = (torch.randn(vocab, hidden, generator=gen, device=device) * 0.02).to(torch.bfloat16)
    points, first_oom = [], None
    for n in counts:
        _reset_peak(device)
        try:
            with torch.no_grad():
                h = torch.randn(n, hidden, generator=gen, device=device).to(torch.bfloat16)
                ids = torch.randint(0, vocab, (n,), generator=gen, device=device)
                temps = torch.where(torch.arange(n, device=device) % 2 == 0, 1.0, 0.01).unsqueeze(-1)
                _sync(device)
                t0 = time.perf_counter()
                logits = h @ head.T
                scaled = scale_logits_fp32(logits, temps, is_unit_temperature=False)
                lp = logprobs_from_logits(scaled, ids)
                ent = entropy_from_logits(scaled)
                _sync(device)
                points.append({"tokens": n, "s": round(time.perf_counter() - t0, 4), "peak_gb": _peak_gb(device),
                               "finite": bool(torch.isfinite(lp).all() and torch.isfinite(ent).all())})
                del logits, scaled, lp, ent, h
        except torch.OutOfMemoryError:
            first_oom = n
            break
    return {"status": "ok", "hidden": hidden, "vocab": vocab, "points": points, "first_oom_tokens": first_oom,
            "note": "bf16 logits, fp32 copy after the temperature division, log-softmax over fp32"}


def verl_memory(dry: bool, work: Path) -> dict[str, Any]:
    import gpu_evidence_verl

    return gpu_evidence_verl.verl_memory(dry, work)


STAGES = {"parity": parity, "embedded_rl": embedded_rl, "engines": engines, "logits_probe": logits_probe,
          "verl_memory": verl_memory}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("stage", choices=["preflight", *STAGES])
    parser.add_argument("out_json")
    parser.add_argument("--work", default=None)
    parser.add_argument("--dry-run", action="store_true")
    parser.add_argument("--require-import", action="append", default=[])
    args = parser.parse_args(argv)
    work = Path(args.work or Path(args.out_json).parent / "work")
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    try:
        if args.stage == "preflight":
            result = preflight(args.dry_run, args.require_import)
        else:
            result = STAGES[args.stage](args.dry_run, work)
    except Exception as exc:  # noqa: BLE001 - a failed stage is reported in summary.json, never skipped
        result = {"status": "fail", "error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}
    result["dry_run"] = args.dry_run
    result["stage_wall_s"] = round(time.perf_counter() - t0, 2)
    Path(args.out_json).write_text(json.dumps(result, indent=1))
    print(json.dumps({k: v for k, v in result.items() if k != "traceback"})[:2000])
    return 0 if result["status"] == "ok" else 1


if __name__ == "__main__":
    sys.exit(main())
