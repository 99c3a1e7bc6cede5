"""The SFT step as `envace sft` runs it on CPU, with transformers' RMSNorms and torch's for-loop AdamW (the
baseline) against the hand-written norm backward (`SFTConfig.fused_norm`, envace.models.rms_norm, what SFT
runs) and against that plus torch's fused AdamW kernel (left out of SFT: no gain beyond the spread here, and
like any change of rounding it trains other weights), on the demo's SFT work.

    OMP_WAIT_POLICY=PASSIVE .venv/bin/python bench/sft_norm_step.py                 # two thread shards, as the demo
    OMP_WAIT_POLICY=PASSIVE .venv/bin/python bench/sft_norm_step.py --threads 1     # the plain one-pass step
    OMP_WAIT_POLICY=PASSIVE .venv/bin/python bench/sft_norm_step.py --batches 20 --repeats 3   # quick

Work: the demo's tiny model, its SFT samples (`--tasks` tool-world tasks) and `--batches` batches, as
`bench/sft_step_bench.py` builds them (`demo_sft_work`). Each arm holds its own copy of the model (the same
starting weights) and its own optimizer, and takes the same batches as whole SFT steps: forward and backward
(`shard_grads` over `--threads` thread shards, or `batch_loss` at one thread), clipping at 1.0 and the AdamW
step (`ShardedOptimizer` with shards).
Arms rotate `--repeats` times after one warm-up pass each; the script prints each repeat's ms per
step, each arm's median and its ratio to the baseline, the per-repeat ratios' spread, and the largest
difference of the first batch's loss between the arms (their forwards are the same ops).
"""

from __future__ import annotations

import argparse
import copy
import functools

import torch


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batches", type=int, default=40)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--tasks", type=int, default=3000)
    ap.add_argument("--threads", type=int, default=2, help="thread shards (1: the one-pass step)")
    args = ap.parse_args()

    from sft_step_bench import demo_sft_work, print_ratios, time_rotated  # bench/ is on sys.path

    from envace.models.rms_norm import use_fused_rms_norm
    from envace.thread_shards import ShardedOptimizer, ShardRunner, one_torch_thread
    from envace.trainers.sft import batch_loss, shard_grads

    torch.set_num_threads(1)
    base_model, tok, cfg, acts, rehs, batches = demo_sft_work(args.tasks, args.batches, fused_norm=False)
    runner = ShardRunner(args.threads) if args.threads > 1 else None

    def arm(fused_norm: bool, fused_adamw: bool):
        model = copy.deepcopy(base_model)
        if fused_norm:
            assert use_fused_rms_norm(model) > 0
        model.train()
        params = [p for p in model.parameters() if p.requires_grad]
        adamw = functools.partial(torch.optim.AdamW, lr=cfg.lr, weight_decay=cfg.weight_decay, fused=fused_adamw)
        opt = adamw(params) if runner is None else ShardedOptimizer(params, runner, adamw)

        def step(b) -> float:
            if runner is None:
                loss, _ = batch_loss(model, b, tok.pad_token_id, True)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(params, 1.0)
                opt.step()
            else:
                loss, _, grads = shard_grads(model, b, tok.pad_token_id, True, runner)
                opt.step(grads, 1.0)
            return float(loss.detach())

        return model, step

    baseline = "transformers' norms, for-loop AdamW"
    arms = {baseline: arm(False, False), "fused norms, for-loop AdamW (sft now)": arm(True, False),
            "fused norms, fused AdamW (left out)": arm(True, True)}
    names = list(arms)
    with one_torch_thread():
        first = {n: arms[n][1](batches[0]) for n in names}  # one warm-up step each, the same first batch
        times = time_rotated({n: arms[n][1] for n in names}, batches, args.repeats)
    if runner is not None:
        runner.close()
    spread = max(abs(first[n] - first[baseline]) for n in names)
    print(f"{len(acts)} Act and {len(rehs)} Rehearse samples, {args.batches} batches; first batch's loss: largest "
          f"difference between arms {spread:.1e}")
    print_ratios(times, baseline, f"{args.threads} thread shards" if runner is not None else "one pass, one thread")


if __name__ == "__main__":
    main()
