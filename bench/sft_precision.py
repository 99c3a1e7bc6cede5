"""The SFT step in float32 (what `envace sft` runs) against bfloat16 autocast, on the demo's SFT work, with
the CPU's float32 and bfloat16 matmul rates beside it: whether mixed precision pays on this CPU.

    OMP_NUM_THREADS=1 taskset -c 0 .venv/bin/python bench/sft_precision.py
    OMP_NUM_THREADS=1 .venv/bin/python bench/sft_precision.py --batches 10 --repeats 2   # quick

A CPU with AMX tiles (Intel Xeon from Sapphire Rapids on) runs bfloat16 matmuls through oneDNN several times
faster than float32; one without them may run them slower. The matmul lines time one float32 and one bfloat16
product of the same shape (a 1024 cube and the demo's MLP shapes) and print the bfloat16 speed-up.

Work: the demo's tiny model, SFT samples and `--batches` batches as `bench/sft_step_bench.py` builds them
(`demo_sft_work`), one pass at one torch thread (autocast is a per-thread state: the shard threads of a
two-thread SFT would each enter it). Each arm holds its own copy of the model (the same starting weights) and
its own AdamW, and takes the same batches as whole steps through `envace.trainers.sft.batch_loss`: forward
(under `torch.autocast("cpu", torch.bfloat16)` in the bf16 arms), backward, clip at 1.0, step. The arms:
- float32, the baseline;
- bf16 autocast: matmuls in bfloat16, autocast's float32 list (softmax, losses) in float32, and the attention
  kernels fed bfloat16 q/k/v (envace's attention functions take their inputs in one dtype; this arm casts the
  query, the keys and values and a trunk's cache to bfloat16 before the kernel);
- bf16 autocast, attention float32: the same with the attention kernels fed float32.
Arms rotate `--repeats` times after one warm-up step each; the script prints each repeat's ms per step, each
arm's median, its ratio to the baseline with the per-repeat spread, and the first batch's loss in every arm.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import dataclasses
import time

import torch


def matmul_rates(shapes: list[tuple[int, int, int]], reps: int = 10) -> list[tuple[tuple, float, float]]:
    """(shape, float32 GFLOP/s, bfloat16 GFLOP/s): the best of `reps` products of (m, k) x (k, n)."""
    out = []
    for m, k, n in shapes:
        rates = []
        for dtype in (torch.float32, torch.bfloat16):
            a, b = torch.randn(m, k, dtype=dtype), torch.randn(k, n, dtype=dtype)
            a @ b
            best = float("inf")
            for _ in range(reps):
                t = time.perf_counter()
                a @ b
                best = min(best, time.perf_counter() - t)
            rates.append(2 * m * k * n / best / 1e9)
        out.append(((m, k, n), *rates))
    return out


@contextlib.contextmanager
def attention_in(dtype: torch.dtype):
    """Every attention kernel of the model fed q, k, v (and a trunk's cache and mask) in `dtype`: transformers'
    sdpa path through `torch.nn.functional.scaled_dot_product_attention`, envace's branch passes through
    `envace.models.attention.split_attention`. Restored on exit."""
    import envace.models.attention as attention
    from envace.models.trunk_attention import _SplitAttention

    sdpa, split = torch.nn.functional.scaled_dot_product_attention, attention.split_attention

    def cast_sdpa(q, k, v, attn_mask=None, **kw):
        mask = attn_mask.to(dtype) if attn_mask is not None and attn_mask.is_floating_point() else attn_mask
        with torch.autocast("cpu", enabled=False):
            return sdpa(q.to(dtype), k.to(dtype), v.to(dtype), attn_mask=mask, **kw)

    def cast_split(q, k, v, trunks, layer, scale):
        tk, tv = trunks.kv[layer]
        lay = dataclasses.replace(trunks.layout, mask=trunks.layout.mask.to(dtype))
        with torch.autocast("cpu", enabled=False):
            return _SplitAttention.apply(q.to(dtype), k.to(dtype), v.to(dtype), tk.to(dtype), tv.to(dtype), lay,
                                         scale)

    torch.nn.functional.scaled_dot_product_attention, attention.split_attention = cast_sdpa, cast_split
    try:
        yield
    finally:
        torch.nn.functional.scaled_dot_product_attention, attention.split_attention = sdpa, split


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batches", type=int, default=40)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--tasks", type=int, default=3000)
    args = ap.parse_args()
    torch.set_num_threads(1)

    from sft_step_bench import demo_sft_work, print_ratios, time_rotated  # bench/ is on sys.path

    from envace.trainers.sft import batch_loss

    for shape, f32, bf16 in matmul_rates([(1024, 1024, 1024), (2048, 128, 384), (2048, 384, 128)]):
        print(f"matmul {shape}: float32 {f32:.0f} GFLOP/s, bfloat16 {bf16:.0f} GFLOP/s (x{bf16 / f32:.2f})")
    base_model, tok, cfg, acts, rehs, batches = demo_sft_work(args.tasks, args.batches)

    def arm(autocast: bool, attention: torch.dtype):
        model = copy.deepcopy(base_model)
        model.train()
        params = [p for p in model.parameters() if p.requires_grad]
        opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)

        def step(b) -> float:
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast), attention_in(attention):
                loss, _ = batch_loss(model, b, tok.pad_token_id, True)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()
            return float(loss.detach())

        return step

    baseline = "float32 (sft now)"
    arms = {baseline: arm(False, torch.float32), "bf16 autocast": arm(True, torch.bfloat16),
            "bf16 autocast, attention float32": arm(True, torch.float32)}
    first = {n: arms[n](batches[0]) for n in arms}  # one warm-up step each, the same first batch
    times = time_rotated(arms, batches, args.repeats)
    print(f"{len(acts)} Act and {len(rehs)} Rehearse samples, {args.batches} batches; first batch's loss: "
          + ", ".join(f"{n} {first[n]:.6f}" for n in arms))
    print_ratios(times, baseline, "one pass, one thread")

if __name__ == "__main__":
    main()
