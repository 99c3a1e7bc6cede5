"""Where is the RL headroom of a checkpoint? K episodes per task at T=1 in the real environment, then
envace.evaluation.anatomy: which task shapes succeed, how many groups are mixed (only those carry a GRPO
signal) and, at each failure's divergence token, whether the policy guessed among alternatives (both
probabilities near 1/m: a missing capability, out of reach of a few RL steps) or slipped on a rare token
(sharpening removes it). Compare two SFT budgets to choose the one that leaves RL something it can learn:

    .venv/bin/python bench/headroom.py runs/signal/sft/model runs/signal/sft2800/model --tasks 200

Baseline: none (a diagnosis, not a speed claim); the numbers of two checkpoints print side by side.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def dissect(model_dir: str, n_tasks: int, k: int, split: str, seed: int) -> dict:
    from envace.evaluation.anatomy import anatomy
    from envace.evaluation.paired import engine_for, score_tasks
    from envace.worlds.generator import generate_tasks

    engine = engine_for(model_dir)
    trajs: list = []
    t0 = time.perf_counter()
    # the paired evaluation's own episodes (real environment, its rollout settings) at T=1, K per task
    score_tasks(engine, generate_tasks(n_tasks, split, seed), seeds=[seed], temperature=1.0, k=k,
                on_trajectories=lambda pass_name, _seed, batch: trajs.extend(batch) if pass_name == "env" else None)
    out = anatomy(trajs).summary(decode=lambda tok: engine.tokenizer.decode([tok]).strip())
    out["wall_s"] = round(time.perf_counter() - t0, 1)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("models", nargs="+", help="model dirs")
    ap.add_argument("--tasks", type=int, default=200)
    ap.add_argument("--k", type=int, default=8)
    ap.add_argument("--split", default="train", help="train: the distribution RL samples from")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", default=None, help="write the summaries here")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    res = {m: dissect(m, args.tasks, args.k, args.split, args.seed) for m in args.models}
    for m, s in res.items():
        print(f"\n== {m}  ({args.tasks} {args.split} tasks x K={args.k}, T=1)")
        print(f"groups: all succeed {s['all_success']}, all fail {s['all_fail']}, mixed {s['mixed']} "
              f"({s['mixed_share']:.0%} carry a success signal)")
        print("success by shape:", s["success_by_shape"])
        print("mixed groups by shape:", s["mixed_groups_by_shape"])
        print(f"divergences {s['divergences']}: p(failing token) {s['p_failing_quantiles']}; "
              f"p(successful sibling's token) {s['p_success_quantiles']}; rare slips (p<0.05) {s['slip_share']:.0%}")
        print("top divergence tokens (shape, token, count):", s["top_divergence_tokens"])
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
