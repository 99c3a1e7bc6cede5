"""What checking a checkpoint before resuming costs, against the baseline of writing it.

Saves the tiny default model (with a real AdamW state) `--saves` times through `save_checkpoint` (the
baseline: model + tokenizer + optimizer state + manifest + fsync + atomic rename), and times
`verify_checkpoint` (meta.json parse, file sizes against the manifest, safetensors headers, optim.pt zip
CRCs) and `latest_checkpoint` on a directory whose newest checkpoint is truncated (verify, warn, fall back).
Prints medians and the ratio verify / save.

    OMP_NUM_THREADS=1 .venv/bin/python bench/checkpoint_verify.py
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
import warnings
from pathlib import Path

import torch


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--saves", type=int, default=7)
    args = ap.parse_args()

    from envace.models.corpus import world_corpus
    from envace.models.loading import load_policy
    from envace.models.tiny import TinyModelConfig, init_tiny_model
    from envace.trainers.checkpoint import latest_checkpoint, save_checkpoint, verify_checkpoint

    torch.set_num_threads(1)
    work = Path(tempfile.mkdtemp(prefix="ckpt-bench-"))
    try:
        model_dir = init_tiny_model(world_corpus(200, seed=0), work / "model", TinyModelConfig(seed=0))
        model, tok = load_policy(model_dir)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        ids = torch.tensor([[1, 2, 3, 4]])
        model(input_ids=ids, labels=ids).loss.backward()
        opt.step()
        save_s, verify_s = [], []
        root = work / "checkpoints"
        for step in range(1, args.saves + 1):
            t0 = time.perf_counter()
            path = save_checkpoint(root, step, {"policy": model}, tok, {"policy": opt}, {}, keep=2)
            save_s.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            verify_checkpoint(path)
            verify_s.append(time.perf_counter() - t0)
        size = sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
        weights = path / "policy" / "model.safetensors"
        weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
        t0 = time.perf_counter()
        with warnings.catch_warnings(record=True):
            warnings.simplefilter("always")
            fallback = latest_checkpoint(root)
        fallback_s = time.perf_counter() - t0
        save_med, verify_med = statistics.median(save_s), statistics.median(verify_s)
        print(f"checkpoint size            {size / 1e6:.1f} MB ({args.saves} saves)")
        print(f"save_checkpoint (baseline) median {save_med * 1e3:.0f} ms")
        print(f"verify_checkpoint          median {verify_med * 1e3:.0f} ms  "
              f"ratio verify/save {verify_med / save_med:.2f}")
        print(f"latest_checkpoint, newest truncated: {fallback_s * 1e3:.0f} ms -> fell back to {fallback.path.name}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
