"""Does the embedded default learn? SFT once, then a fixed RL budget per method and RL seed, each
evaluated with the REAL environment over several evaluation seeds.

    .venv/bin/python bench/learning_signal.py --out runs/signal            # full (~60 min on 2 idle cores)
    .venv/bin/python bench/learning_signal.py --out runs/signal2 --sft-dir runs/signal/sft   # reuse the SFT
    .venv/bin/python bench/learning_signal.py --out /tmp/sig --quick       # smoke

Reports, for the SFT checkpoint and every (method, RL seed): held-out test tasks (unseen entity x task
shape pairs) and fresh training-distribution tasks, each greedy and at T=1 (mean over eval seeds);
success (verifiable end state) and checklist reward; rehearsal fidelity (exact match / JSON validity of
rehearsed vs real responses); wall time. The baseline every number is compared with is the SFT
checkpoint measured in the same run. Never tunes on the test split: all choices were made on the
training distribution.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from envace.config import RolloutConfig, SamplingConfig
from envace.engines.hf import HFEngine
from envace.evaluation.world import evaluate_world
from envace.models.corpus import world_corpus
from envace.models.loading import load_policy
from envace.models.tiny import TinyModelConfig, init_tiny_model
from envace.trainers.config import DataConfig, SFTConfig, TrainConfig
from envace.trainers.embedded import train
from envace.trainers.sft import sft
from envace.types import Role
from envace.worlds.generator import generate_tasks

METHODS = {
    "envace": {"rollout": {"mode": "rehearse"}},
    "grpo_env": {"rollout": {"mode": "env"}},
    "per_role": {"rollout": {"mode": "rehearse"}, "policy": "per_role"},
}


def evaluate(model_dir: Path, held_out, in_dist, eval_seeds: list[int], rehearse_dir: Path | None = None) -> dict:
    """`rehearse_dir`: the per-role ablation's Rehearse model (Act is `model_dir`)."""
    engine = HFEngine(*load_policy(model_dir))
    if rehearse_dir is not None:
        engine = {Role.ACT: engine, Role.REHEARSE: HFEngine(*load_policy(rehearse_dir))}
    rollout = RolloutConfig(mode="env", act=SamplingConfig(temperature=0.0, max_new_tokens=64),
                            rehearse=SamplingConfig(temperature=0.0, max_new_tokens=48))
    out = {}
    for name, tasks in (("held_out", held_out), ("in_dist", in_dist)):
        g = evaluate_world(engine, tasks, rollout, seeds=[0], temperature=0.0, with_fidelity=(name == "held_out"))
        s = evaluate_world(engine, tasks, rollout, seeds=eval_seeds, temperature=1.0, with_fidelity=False)
        out[name] = {"greedy_success": g["success"], "greedy_reward": g["reward"],
                     "t1_success": s["success"], "t1_reward": s["reward"],
                     "t1_success_per_seed": s["success_per_seed"], "t1_reward_per_seed": s["reward_per_seed"]}
        if "fidelity" in g:
            out["fidelity"] = {k: g["fidelity"].get(k) for k in ("pairs", "json_valid", "schema_ok", "exact_match", "field_f1",
                                                               "determined_pairs", "determined_exact_match")}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="runs/signal")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--sft-steps", type=int, default=1400)
    ap.add_argument("--sft-tasks", type=int, default=6000)
    ap.add_argument("--sft-dir", default=None, help="reuse this SFT output dir (holds model/ and sft_summary.json)")
    ap.add_argument("--rl-steps", type=int, default=30)
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--k", type=int, default=8)
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--methods", default="envace,grpo_env,per_role")
    ap.add_argument("--rl-seeds", default="0,1,2")
    ap.add_argument("--eval-seeds", default="0,1,2")
    ap.add_argument("--eval-tasks", type=int, default=100)
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args()
    if args.quick:
        args.sft_steps, args.rl_steps, args.prompts, args.k, args.eval_tasks = 20, 2, 2, 2, 6
        args.rl_seeds, args.eval_seeds = "0", "0"
    if args.threads:
        torch.set_num_threads(args.threads)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rl_seeds = [int(s) for s in args.rl_seeds.split(",")]
    eval_seeds = [int(s) for s in args.eval_seeds.split(",")]
    held_out = generate_tasks(args.eval_tasks, "test", 0)
    in_dist = generate_tasks(args.eval_tasks, "train", 777)  # fresh train-distribution tasks (own seed)
    report: dict = {"args": vars(args), "runs": {}}
    t0 = time.perf_counter()
    if args.sft_dir:
        sft_dir = Path(args.sft_dir)
        sft_sum = json.loads((sft_dir / "sft_summary.json").read_text())
    else:
        sft_dir = out / "sft"
        tiny = init_tiny_model(world_corpus(600, seed=0), out / "tiny", TinyModelConfig(seed=0))
        sft_sum = sft(SFTConfig(model=str(tiny), out_dir=str(sft_dir), steps=args.sft_steps, progress=False,
                                data=DataConfig(n_tasks=args.sft_tasks, seed=0)))
    report["sft"] = sft_sum
    report["runs"]["sft"] = {"eval": evaluate(sft_dir / "model", held_out, in_dist, eval_seeds),
                             "wall_s": sft_sum["wall_s"]}
    print(json.dumps({"sft": report["runs"]["sft"]}, indent=1), flush=True)
    for method in args.methods.split(","):
        for seed in rl_seeds:
            tcfg = TrainConfig.model_validate({
                "model": str(sft_dir / "model"), "out_dir": str(out / f"{method}_s{seed}"), "steps": args.rl_steps,
                "prompts_per_step": args.prompts, "k": args.k, "save_every": args.rl_steps, "seed": seed,
                "optim": {"lr": args.lr}, "data": {"n_tasks": 3000, "seed": 1}, "progress": False,
                "tracking": {"enabled": False}, **METHODS[method]})
            t1 = time.perf_counter()
            res = train(tcfg)
            wall = time.perf_counter() - t1
            per_role = tcfg.policy == "per_role"
            ckpt = res.checkpoint / ("act" if per_role else "policy")
            run = {"eval": evaluate(ckpt, held_out, in_dist, eval_seeds,
                                    res.checkpoint / "rehearse" if per_role else None), "wall_s": wall,
                   "train_reward_first": res.history[0]["reward/mean"], "train_reward_last": res.history[-1]["reward/mean"],
                   "groups_with_variance": statistics.mean(h["reward/groups_with_variance"] for h in res.history)}
            report["runs"][f"{method}_s{seed}"] = run
            print(json.dumps({f"{method}_s{seed}": run}, indent=1), flush=True)
            (out / "report.json").write_text(json.dumps(report, indent=2))
    report["wall_s"] = time.perf_counter() - t0
    (out / "report.json").write_text(json.dumps(report, indent=2))
    print_table(report)


def print_table(report: dict) -> None:
    base = report["runs"]["sft"]["eval"]
    print(f"\n{'run':14} {'HO greedy':>9} {'HO T=1':>7} {'HO T1 rew':>9} {'ID greedy':>9} {'ID T=1':>7} {'ID T1 rew':>9} {'fid.ex':>6} {'wall':>6}")
    for name, run in report["runs"].items():
        e = run["eval"]
        print(f"{name:14} {e['held_out']['greedy_success']:9.3f} {e['held_out']['t1_success']:7.3f} "
              f"{e['held_out']['t1_reward']:9.3f} {e['in_dist']['greedy_success']:9.3f} {e['in_dist']['t1_success']:7.3f} "
              f"{e['in_dist']['t1_reward']:9.3f} {(e.get('fidelity') or {}).get('exact_match') or 0:6.3f} {run['wall_s']:6.0f}")
    print(f"(baseline = the sft row, measured in the same run; eval-seed spread of SFT T=1 in-dist success: "
          f"{min(base['in_dist']['t1_success_per_seed']):.3f}–{max(base['in_dist']['t1_success_per_seed']):.3f})")
    print("\nper method, mean ± std over RL seeds, change vs SFT:")
    for method in dict.fromkeys(n.rsplit("_s", 1)[0] for n in report["runs"] if n != "sft"):
        runs = [r for n, r in report["runs"].items() if n.rsplit("_s", 1)[0] == method]
        parts = []
        for split in ("held_out", "in_dist"):
            for key in ("greedy_success", "t1_success", "t1_reward"):
                xs = [r["eval"][split][key] for r in runs]
                sd = statistics.pstdev(xs) if len(xs) > 1 else 0.0
                parts.append(f"{split}.{key} {statistics.mean(xs) - base[split][key]:+.3f}±{sd:.3f}")
        fid = [(r["eval"].get("fidelity") or {}).get("exact_match") or 0.0 for r in runs]
        parts.append(f"fid.exact {statistics.mean(fid):.3f}")
        print(f"  {method} (n={len(runs)}, wall {statistics.mean(r['wall_s'] for r in runs):.0f} s/run): " + "; ".join(parts))


if __name__ == "__main__":
    main()
