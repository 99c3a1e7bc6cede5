"""The optimizer step of an SFT step in thread shards: the shards' gradients summed, clipped by the global norm
and stepped by AdamW on the calling thread (the baseline: `add_grads` per shard, `clip_grad_norm_`, one
AdamW) against the same step in the shard threads (`envace.thread_shards.ShardedOptimizer`, what the SFT loop
runs with shards at 2 M parameters or more, `PARALLEL_STEP_MIN_PARAMS`; bit for bit the same update).

    OMP_WAIT_POLICY=PASSIVE .venv/bin/python bench/sft_optimizer_step.py              # SmolLM2-135M's shapes
    OMP_WAIT_POLICY=PASSIVE .venv/bin/python bench/sft_optimizer_step.py --shape tiny # the demo's model

Work: parameters of the named model's shapes (random; the step's cost depends only on the shapes: SmolLM2-135M
is 30 layers of width 576, MLP 1536, 9 query and 3 key/value heads of 64, a tied 49,152-row embedding; `tiny`
is the demo's 2 layers of width 128), two shards' random gradients, at one torch thread per thread (the SFT
loop's setting), `--threads` shard threads. The arms alternate `--pairs` times after one warm-up each; the
script prints each pair's ratio and the medians.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

SHAPES = {  # (vocab, hidden, mlp, q width, kv width, layers)
    "smollm2-135m": (49152, 576, 1536, 576, 192, 30),
    "tiny": (1024, 128, 384, 128, 64, 2),
}


def shapes(name: str) -> list[tuple[int, ...]]:
    vocab, hidden, mlp, q, kv, layers = SHAPES[name]
    per_layer = [(q, hidden), (kv, hidden), (kv, hidden), (hidden, q), (mlp, hidden), (mlp, hidden), (hidden, mlp),
                 (hidden,), (hidden,)]
    return [(vocab, hidden)] + per_layer * layers + [(hidden,)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shape", choices=sorted(SHAPES), default="smollm2-135m")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--pairs", type=int, default=5)
    args = ap.parse_args()

    from envace.thread_shards import (
        PARALLEL_STEP_MIN_PARAMS,
        ShardedOptimizer,
        ShardRunner,
        add_grads,
        one_torch_thread,
    )

    torch.manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(s) * 0.02) for s in shapes(args.shape)]
    grads = [[torch.randn(p.shape) * 1e-3 for p in params] for _ in range(args.threads)]
    print(f"{args.shape}: {sum(p.numel() for p in params) / 1e6:.1f} M parameters in {len(params)} tensors, "
          f"{args.threads} shards")
    with ShardRunner(args.threads) as runner, one_torch_thread():
        plain = torch.optim.AdamW(params, lr=1e-5)
        split = ShardedOptimizer(params, runner, lambda ps: torch.optim.AdamW(ps, lr=1e-5), min_params=0)

        def calling_thread() -> None:
            for p in params:
                p.grad = None
            for shard in grads:
                add_grads(params, shard)
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            plain.step()

        def shard_threads() -> None:
            split.step(grads, 1.0)

        arms = {"on the calling thread (baseline)": calling_thread, "in the shard threads": shard_threads}
        times: dict[str, list[float]] = {name: [] for name in arms}
        for fn in arms.values():
            fn()
        for _ in range(args.pairs):
            for name, fn in arms.items():
                t = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - t)
    base, new = times["on the calling thread (baseline)"], times["in the shard threads"]
    print("pairs (baseline / shard threads): " + ", ".join(f"{a / b:.2f}" for a, b in zip(base, new)))
    for name, ts in times.items():
        print(f"  {name:34s} {statistics.median(ts) * 1e3:8.2f} ms (median of {len(ts)})")
    print(f"speed-up of the step in the shard threads: x{statistics.median(base) / statistics.median(new):.2f}")
    whole = sum(p.numel() for p in params) < PARALLEL_STEP_MIN_PARAMS
    print(f"the SFT loop steps this size {'whole on the calling thread' if whole else 'in the shard threads'} "
          f"(ShardedOptimizer's gate: {PARALLEL_STEP_MIN_PARAMS / 1e6:.0f} M parameters)")


if __name__ == "__main__":
    main()
