"""`torch.compile` on the SFT step: its compile time against the step time it saves, on the demo's SFT work,
beside the step `envace sft` runs (eager, the batch's shared prefixes run once).

    OMP_NUM_THREADS=1 taskset -c 0 .venv/bin/python bench/sft_compile.py
    OMP_NUM_THREADS=1 .venv/bin/python bench/sft_compile.py --batches 6 --repeats 1   # quick

Work: the demo's tiny model, SFT samples and batches as `bench/sft_step_bench.py` builds them
(`demo_sft_work`), one pass at one torch thread, forward + backward + AdamW step per batch. The arms:
- shared prefix, eager: what `envace sft` runs (`batch_loss` with `share_prefix`), the baseline;
- padded, eager: one padded forward with full logits (`share_prefix=False`);
- padded, compiled: the same with the model's decoder under `torch.compile(dynamic=True)` (inductor, C++
  kernels; needs a C++ compiler).
The shared-prefix path is not compiled: its trunk pass stops at the last layer's keys by raising from inside
the model's KV cache (envace.engines.logprobs.trunk_keys), which dynamo does not trace.
The compiled arm's first step (the compilation, cold: inductor's caches in a fresh temp directory unless
TORCHINDUCTOR_CACHE_DIR is set) and its further warm-up steps (recompilations for new shapes) are timed apart;
then the arms rotate `--repeats` times over `--batches` further batches. The script prints each repeat's ms
per step, the ratio table, and the steps a compiled step would need to repay its compile time against the
baseline ("never" where it is not faster).
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import tempfile
import time

import torch


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batches", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=10, help="compiled-arm warm-up batches after the first")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--tasks", type=int, default=3000)
    args = ap.parse_args()
    torch.set_num_threads(1)
    # a cold compile, as a user's first run pays it: inductor's caches in a fresh directory unless one is given
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", tempfile.mkdtemp(prefix="envace-inductor-"))

    from sft_step_bench import demo_sft_work, print_ratios, time_rotated  # bench/ is on sys.path

    from envace.trainers.sft import batch_loss

    base_model, tok, cfg, acts, rehs, batches = demo_sft_work(args.tasks, 1 + args.warmup + args.batches)
    first, warm, timed = batches[0], batches[1:1 + args.warmup], batches[1 + args.warmup:]

    def arm(share: bool, compiled: bool):
        model = copy.deepcopy(base_model)
        model.train()
        if compiled:
            model.model = torch.compile(model.model, dynamic=True)
        opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)

        def step(b) -> float:
            loss, _ = batch_loss(model, b, tok.pad_token_id, share)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            return float(loss.detach())

        return step

    baseline, compiled = "shared prefix, eager (sft now)", "padded, compiled"
    arms = {baseline: arm(True, False), "padded, eager": arm(False, False), compiled: arm(False, True)}
    losses = {}
    for name, step in arms.items():
        t = time.perf_counter()
        losses[name] = step(first)
        if name == compiled:
            t_compile = time.perf_counter() - t
            t = time.perf_counter()
            for b in warm:
                step(b)
            t_warm = time.perf_counter() - t
    print(f"compile: first step {t_compile:.1f} s, the next {len(warm)} steps {t_warm:.1f} s (recompilations "
          f"included); first batch's loss: " + ", ".join(f"{n} {v:.6f}" for n, v in losses.items()))
    times = time_rotated(arms, timed, args.repeats)
    print_ratios(times, baseline, "one pass, one thread")
    saved = statistics.median(times[baseline]) - statistics.median(times[compiled])
    print(f"steps to repay the compile time against the baseline: "
          f"{t_compile / saved:.0f}" if saved > 0 else "steps to repay the compile time against the baseline: never")


if __name__ == "__main__":
    main()
