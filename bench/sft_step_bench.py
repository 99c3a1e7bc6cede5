"""The SFT step: a batch's shared prefixes run once (`share_prefix`, the default: sequences that go on sharing
a longer prefix in trunks of their own, `prefix_groups`) and the batch's common prefix alone as the one
trunk (`prefix_groups=False`) vs one padded forward with full logits (the baseline), and at more than one
thread the batch in thread shards (`SFTConfig.shards`, the default there: one shard per thread, each at one
torch thread), on the demo's SFT work.

    OMP_NUM_THREADS=1 taskset -c 0 .venv/bin/python bench/sft_step_bench.py
    OMP_NUM_THREADS=1 .venv/bin/python bench/sft_step_bench.py --batches 10 --repeats 2   # quick
    OMP_WAIT_POLICY=PASSIVE .venv/bin/python bench/sft_step_bench.py --threads 2   # as the demo runs it on 2 cores

Work (`demo_sft_work`): the demo's tiny model (`build_model`, 600 corpus tasks, seed 0, built in a temp dir;
its RMSNorms as SFT runs them, `SFTConfig.fused_norm`), its SFT samples (3,000 tool-world tasks: packed Act
conversations and Rehearse calls) and its batches (16 sequences of one role, `BatchDrawer`, seed 0); each arm
runs the same `--batches` batches as forward + backward + AdamW step through `envace.trainers.sft.batch_loss`
(the shard arms through `sharded_batch_grads`), `--threads` torch threads (default one; an `envace` command
runs with OMP_WAIT_POLICY=PASSIVE, which the runtime reads at start-up, so set it outside to time what it
runs). Arms rotate `--repeats` times; the script prints each repeat's ms per step, the median speed-ups
against the padded baseline, the tokens each arm runs per batch, and the largest loss difference between the
shared-prefix and padded arms on the first batches (float32).
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from pathlib import Path

import torch


def demo_sft_work(n_tasks: int, n_batches: int, fused_norm: bool = True):
    """The demo's tiny model (600 corpus tasks, seed 0, built in a temp dir) loaded on CPU (its RMSNorms
    swapped as SFT swaps them when `fused_norm`, envace.models.rms_norm), its SFT config, samples of
    `n_tasks` tool-world tasks (seed 0) and the first `n_batches` batches (`BatchDrawer`, seed 0):
    (model, tokenizer, config, Act samples, Rehearse samples, batches)."""
    from envace.data.config import DataConfig
    from envace.data.tasks import load_tasks
    from envace.models.loading import load_policy
    from envace.models.rms_norm import use_fused_rms_norm
    from envace.models.tiny import TinyModelConfig
    from envace.pipeline import build_model
    from envace.trainers.config import SFTConfig
    from envace.trainers.sft import BatchDrawer
    from envace.trainers.sft_samples import build_samples

    tmp = Path(tempfile.mkdtemp(prefix="envace-sft-bench-"))
    model_dir = build_model(tmp / "model", 600, TinyModelConfig(seed=0))
    cfg = SFTConfig(model=str(model_dir), data=DataConfig(n_tasks=n_tasks, seed=0))
    model, tok = load_policy(model_dir, device="cpu")
    if fused_norm:
        use_fused_rms_norm(model)
    acts, rehs = build_samples(load_tasks(cfg.data), tok, cfg)
    draw = BatchDrawer(acts, rehs, cfg, random.Random(0))
    return model, tok, cfg, acts, rehs, [draw() for _ in range(n_batches)]


def time_rotated(arms: dict, batches: list, repeats: int) -> dict[str, list[float]]:
    """Each arm's seconds per batch in each of `repeats` passes over `batches`, the arms' order rotating by
    one each repeat; prints every repeat's ms per step."""
    names = list(arms)
    times: dict[str, list[float]] = {n: [] for n in names}
    for rep in range(repeats):
        for name in names[rep % len(names):] + names[:rep % len(names)]:
            t = time.perf_counter()
            for b in batches:
                arms[name](b)
            times[name].append((time.perf_counter() - t) / len(batches))
        print(f"repeat {rep}: " + ", ".join(f"{n} {times[n][-1] * 1e3:.1f} ms/step" for n in names), flush=True)
    return times


def print_ratios(times: dict[str, list[float]], baseline: str, how: str) -> None:
    """Each arm's median ms per step, its ratio to `baseline`'s median and the per-repeat ratios' range."""
    base = statistics.median(times[baseline])
    print(f"median ms per SFT step ({how}), ratio to {baseline} (the baseline), per-repeat ratios:")
    width = max(len(n) for n in times)
    for n, ts in times.items():
        ratios = [t / b for t, b in zip(ts, times[baseline])]
        print(f"  {n:{width}s} {statistics.median(ts) * 1e3:6.1f} ms  x{statistics.median(ts) / base:.3f}"
              f"  [{min(ratios):.3f}, {max(ratios):.3f}]")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batches", type=int, default=40)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--tasks", type=int, default=3000)
    ap.add_argument("--threads", type=int, default=1, help="torch threads (the demo's SFT takes one per core)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    from envace.thread_shards import ShardRunner, one_torch_thread
    from envace.trainers.packing import shared_prefix_packs
    from envace.trainers.sft import batch_loss, sharded_batch_grads

    model, tok, cfg, acts, rehs, batches = demo_sft_work(args.tasks, args.batches)
    padded = statistics.mean(len(b) * max(len(s.ids) for s in b) for b in batches)
    shared, one_trunk = (statistics.mean(
        sum(p.tokens for p in shared_prefix_packs([s.ids for s in b],
                                                  [[j - 1 for j, t in enumerate(s.is_target) if t] for s in b],
                                                  b[0].role, groups=groups))
        for b in batches) for groups in (True, False))
    with torch.no_grad():
        diff = max(abs(float(batch_loss(model, b, tok.pad_token_id, True)[0])
                       - float(batch_loss(model, b, tok.pad_token_id, False)[0])) for b in batches[:5])
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
    model.train()
    runner = ShardRunner(args.threads) if args.threads > 1 else None

    def one_pass(b, share: bool, groups: bool = True) -> None:
        loss, _ = batch_loss(model, b, tok.pad_token_id, share, groups)
        opt.zero_grad(set_to_none=True)
        loss.backward()

    def sharded(b, groups: bool) -> None:
        with one_torch_thread():
            sharded_batch_grads(model, b, tok.pad_token_id, True, runner, groups)

    arms = {"padded full logits": lambda b: one_pass(b, False),
            "shared prefix, one trunk": lambda b: one_pass(b, True, False),
            "shared prefix": lambda b: one_pass(b, True)}
    if runner is not None:
        arms[f"one trunk, {args.threads} thread shards"] = lambda b: sharded(b, False)
        arms[f"shared prefix, {args.threads} thread shards"] = lambda b: sharded(b, True)

    def with_update(one_batch):
        def step(b) -> None:
            one_batch(b)
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
        return step

    names = list(arms)
    times = time_rotated({n: with_update(arms[n]) for n in names}, batches, args.repeats)
    if runner is not None:
        runner.close()
    base = statistics.median(times["padded full logits"])
    print(f"tokens per batch: padded {padded:.0f}, one trunk {one_trunk:.0f}, shared prefix {shared:.0f} "
          f"({len(acts)} Act and {len(rehs)} Rehearse samples); largest loss difference {diff:.1e}")
    print(f"median s/step at {args.threads} thread(s), speed-up vs padded full logits (the baseline):")
    for n in names:
        med = statistics.median(times[n])
        print(f"  {n:34s} {med:.3f} s/step  x{base / med:.2f}")


if __name__ == "__main__":
    main()
