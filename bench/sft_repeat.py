"""Run-to-run repeatability of SFT: the same seed and config in separate processes, the trained weights hashed.

    OMP_WAIT_POLICY=PASSIVE .venv/bin/python bench/sft_repeat.py --runs 8 --steps 120 --threads 2
    OMP_NUM_THREADS=1 .venv/bin/python bench/sft_repeat.py --runs 2 --steps 120 --threads 1

Each run is a fresh Python process (`--child`) that trains the project's tiny model (built once in a temp
dir by `init_tiny_model`) for `--steps` SFT steps on the generated tool world (3,000 tasks, seed 0, the
demo's SFT settings otherwise) at `--threads` torch threads (at 2, the SFT runs in two thread shards), then
prints a SHA-256 of the weights and the final losses. The parent prints every run and how many distinct
weight hashes came out: 1 means the runs were bit-equal. Wall time is not the point here; no ratio is
printed.
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import subprocess
import sys
import tempfile
from pathlib import Path


def child(model_dir: str, out: str, steps: int, threads: int) -> None:
    from envace.models.loading import load_policy
    from envace.trainers.sft import SFTConfig, sft

    cfg = SFTConfig(model=model_dir, out_dir=out, steps=steps, seed=0, threads=threads, progress=False,
                    data={"source": "world", "n_tasks": 3000, "seed": 0, "split": "train"})
    summary = sft(cfg)
    model, _ = load_policy(str(Path(out) / "model"), device="cpu", dtype="float32")
    digest = hashlib.sha256()
    for _, tensor in sorted(model.state_dict().items()):
        digest.update(tensor.detach().contiguous().numpy().tobytes())
    print(f"{digest.hexdigest()[:16]} act_loss={summary['act_loss']!r} rehearse_loss={summary['rehearse_loss']!r}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=4)
    ap.add_argument("--steps", type=int, default=120)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--child", nargs=2, metavar=("MODEL_DIR", "OUT"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child[0], args.child[1], args.steps, args.threads)
        return

    from envace.models.corpus import world_corpus
    from envace.models.tiny import TinyModelConfig, init_tiny_model

    with tempfile.TemporaryDirectory() as tmp:
        model_dir = str(init_tiny_model(list(world_corpus(300, seed=0)), Path(tmp) / "tiny", TinyModelConfig()))
        seen: collections.Counter[str] = collections.Counter()
        for run in range(args.runs):
            cmd = [sys.executable, "-P", __file__, "--child", model_dir, str(Path(tmp) / f"run{run}"),
                   "--steps", str(args.steps), "--threads", str(args.threads)]
            out = subprocess.run(cmd, capture_output=True, text=True)
            if out.returncode:
                sys.exit(f"run {run} failed (exit {out.returncode}):\n{out.stderr[-2000:]}")
            line = out.stdout.strip().splitlines()[-1]
            seen[line.split()[0]] += 1
            print(f"run {run}: weights {line}", flush=True)
    print(f"{args.runs} runs of {args.steps} steps at {args.threads} thread(s): {len(seen)} distinct weight hash(es) "
          f"({', '.join(f'{h} x{n}' for h, n in seen.most_common())})")


if __name__ == "__main__":
    main()
