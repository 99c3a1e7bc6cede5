"""Does RL on the embedded default learn? One SFT checkpoint, then a fixed RL budget per method and RL
seed, each compared with the SFT start PAIRED: the same held-out tasks and the same sampling seeds, the
per-task difference with a 95 % interval (seeded bootstrap over tasks; paired t beside it).

    # the SFT start, once: the signal recipe (2800 steps x 16 on 6000 tasks; --sft-recipe demo is the
    # demo's 1400 x 16 on 3000, whose calendar copying is at chance: bench/headroom.py)
    .venv/bin/python bench/learning_signal.py --sft-dir runs/signal/sft --make-sft
    # a recipe on the VALIDATION split (choose recipes here), results appended as JSON lines
    .venv/bin/python bench/learning_signal.py --sft-dir runs/signal/sft --out runs/signal/r1 \\
        --config configs/train/envace_signal.yaml --methods envace --rl-seeds 0 --split val
    # the learning-signal table: read the TEST split once, >= 3 RL seeds per method
    .venv/bin/python bench/learning_signal.py --sft-dir runs/signal/sft --out runs/signal/test \\
        --config configs/train/envace_signal.yaml --methods envace,grpo_env,per_role --rl-seeds 0,1,2 --split test
    .venv/bin/python bench/learning_signal.py --out /tmp/sig --quick      # smoke (a minute)

Baseline: the SFT checkpoint, scored in the same process on the same tasks and seeds (its scores are
cached beside the SFT model per (split, tasks, seeds, temperature), so every run compares against the
identical numbers). Metrics: success (verified end state) and checklist reward, greedy and at T=1 with
`--eval-seeds` samples per task, pass@n next to pass@1. Per method: the change pooled over RL seeds
(the per-task mean over seeds' checkpoints, paired bootstrap against SFT) and the spread over seeds
(mean ± t interval of the per-seed changes). `--collect` also prints the sweeps' seed-level table
(envace.sweeps.paired_report: the RL seed as the unit, task-only interval beside it, Holm over the comparisons,
one table per mode) of every method vs SFT, vs the first method, and each other pair; it is saved as
`collected_<split>_paired.csv`. Wall time per run is the RL training time.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from envace.config import load_config  # noqa: E402
from envace.evaluation.paired import (  # noqa: E402
    Split,
    TaskScores,
    compare,
    engine_for,
    held_out_tasks,
    load_or_score,
    mean_interval,
    paired_bootstrap,
    tasks_for_half_width,
)
from envace.trainers.config import TrainConfig  # noqa: E402

METHODS = {
    "envace": ["rollout.mode=rehearse"],
    "grpo_env": ["rollout.mode=env"],
    "per_role": ["rollout.mode=rehearse", "policy=per_role"],
}
SFT_RECIPES = {
    "demo": {"corpus_tasks": 600, "sft_tasks": 3000, "sft_steps": 1400},  # envace/demo.py's
    # twice the steps on twice the tasks: the policy copies days, hours and amounts (bench/headroom.py), so
    # RL's failures to fix are slips and choices it half-knows rather than guesses among five weekdays
    "signal": {"corpus_tasks": 600, "sft_tasks": 6000, "sft_steps": 2800},
}


def make_sft(sft_dir: Path, steps: int, tasks: int, corpus_tasks: int, seed: int = 0) -> dict:
    from envace.data.config import DataConfig
    from envace.models.corpus import world_corpus
    from envace.models.tiny import TinyModelConfig, init_tiny_model
    from envace.trainers.config import SFTConfig
    from envace.trainers.sft import sft

    tiny = init_tiny_model(world_corpus(corpus_tasks, seed=seed), sft_dir.parent / "tiny", TinyModelConfig(seed=seed))
    return sft(SFTConfig(model=str(tiny), out_dir=str(sft_dir), steps=steps, seed=seed, progress=False,
                         data=DataConfig(n_tasks=tasks, seed=seed)))


def score_checkpoint(model_dir: Path, rehearse_dir: Path | None, tasks, eval_seeds: list[int],
                     cache_dir: Path | None) -> dict[str, TaskScores]:
    """Greedy (one pass) and T=1 (one pass per eval seed) per-task scores."""
    split = tasks[0].meta["split"]
    out = {}
    for name, seeds, temp in (("greedy", [0], 0.0), ("t1", eval_seeds, 1.0)):
        cache = None
        if cache_dir is not None:
            cache = cache_dir / f"{split}_{len(tasks)}_{name}_{'-'.join(map(str, seeds))}.json"
        out[name] = load_or_score(cache, lambda: engine_for(model_dir, rehearse_dir), tasks, seeds=seeds,
                                  temperature=temp)
    return out


def train_one(args, method: str, seed: int, out: Path) -> tuple[Path, Path | None, dict]:
    from envace.trainers.embedded import train

    overrides = [f"model={args.sft_dir / 'model'}", f"out_dir={out}", f"seed={seed}", "progress=false",
                 "tracking.enabled=false", *METHODS[method], *args.set]
    tcfg = load_config(TrainConfig, args.config, overrides)
    tcfg = tcfg.model_copy(update={"save_every": tcfg.steps, "keep_checkpoints": 1})
    t0, c0 = time.perf_counter(), time.process_time()
    res = train(tcfg)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    hist = res.history
    info = {"wall_s": wall, "cpu_s": cpu, "steps": tcfg.steps, "prompts_per_step": tcfg.prompts_per_step, "k": tcfg.k,
            "lr": tcfg.optim.lr, "train_reward_first": hist[0]["reward/mean"],
            "train_reward_last": hist[-1]["reward/mean"],
            "train_reward_last5": statistics.mean(h["reward/mean"] for h in hist[-5:]),
            "train_reward_first5": statistics.mean(h["reward/mean"] for h in hist[:5])}
    # every step's metrics (noise scale, kept share, ...)
    (out / "history.json").write_text(json.dumps(hist, default=float))
    return (*final_models(out), info)


def row_of(cmp: dict) -> dict:
    return {k: {kk: round(vv, 5) if isinstance(vv, float) else vv for kk, vv in v.items()} if isinstance(v, dict) else v
            for k, v in cmp.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="runs/signal")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--sft-dir", type=Path, default=None, help="SFT output dir (model/ inside); default <out>/sft")
    ap.add_argument("--make-sft", action="store_true", help="only build the SFT checkpoint (--sft-recipe)")
    ap.add_argument("--sft-recipe", choices=sorted(SFT_RECIPES), default="signal",
                    help="SFT budget when --sft-dir holds no model yet")
    ap.add_argument("--config", default=str(ROOT / "configs/train/envace_signal.yaml"),
                    help="RL budget (TrainConfig YAML)")
    ap.add_argument("--set", action="append", default=[], help="extra TrainConfig key=value for every run")
    ap.add_argument("--methods", default="envace,grpo_env,per_role")
    ap.add_argument("--rl-seeds", default="0,1,2")
    ap.add_argument("--eval-seeds", default="0,1", help="T=1 samples per task (pass@n uses all of them)")
    ap.add_argument("--eval-tasks", type=int, default=1000)
    ap.add_argument("--split", choices=[s.value for s in Split], default="val",
                    help="val to choose recipes; test read once for a reported number")
    ap.add_argument("--results", default=None, help="append one JSON line per run here")
    ap.add_argument("--tag", default="", help="label stored with each result line")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--n-boot", type=int, default=10_000)
    ap.add_argument("--collect", nargs="+", default=None, metavar="OUT",
                    help="no training: pool finished runs of earlier invocations (their --out dirs) into one table")
    args = ap.parse_args()
    if args.quick:
        args.eval_tasks, args.rl_seeds, args.eval_seeds, args.methods = 6, "0", "0,1", "envace,grpo_env"
        args.set = [*args.set, "steps=2", "prompts_per_step=2", "k=2"]
    unknown = [m for m in args.methods.split(",") if m and m not in METHODS]
    if unknown:
        ap.error(f"--methods: unknown {unknown}; choose from {sorted(METHODS)}")
    torch.set_num_threads(args.threads)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    args.sft_dir = args.sft_dir or out / "sft"
    if not (args.sft_dir / "model" / "config.json").is_file():
        recipe = {"sft_steps": 20, "sft_tasks": 100, "corpus_tasks": 60} if args.quick else SFT_RECIPES[args.sft_recipe]
        t0 = time.perf_counter()
        s = make_sft(args.sft_dir, recipe["sft_steps"], recipe["sft_tasks"], recipe["corpus_tasks"])
        print(f"SFT: {json.dumps(s, default=str)} ({time.perf_counter() - t0:.0f} s)", flush=True)
    if args.make_sft:
        return
    tasks = held_out_tasks(args.split, args.eval_tasks)
    eval_seeds = [int(s) for s in args.eval_seeds.split(",")]
    base: dict[str, TaskScores] = {}
    if args.collect:
        collect(args, tasks, eval_seeds)
        return

    def sft_scores() -> dict[str, TaskScores]:  # after the first training run (a parallel run may have cached it)
        if not base:
            t0 = time.perf_counter()
            base.update(score_checkpoint(args.sft_dir / "model", None, tasks, eval_seeds, args.sft_dir / "eval_cache"))
            print(f"SFT scored ({time.perf_counter() - t0:.0f} s, cached): "
                  f"greedy success {base['greedy'].success.mean():.3f} "
                  f"reward {base['greedy'].reward.mean():.3f}; T=1 success {base['t1'].success.mean():.3f} "
                  f"reward {base['t1'].reward.mean():.3f}", flush=True)
        return base

    report = {"args": {k: str(v) for k, v in vars(args).items()}, "runs": {}}
    per_method: dict[str, list[dict[str, TaskScores]]] = {}
    for method in [m for m in args.methods.split(",") if m]:  # "" = only score the SFT checkpoint
        for seed in (int(s) for s in args.rl_seeds.split(",")):
            name = f"{method}_s{seed}"
            act, reh, info = train_one(args, method, seed, out / name)
            t1, c1 = time.perf_counter(), time.process_time()
            scores = score_checkpoint(act, reh, tasks, eval_seeds, out / name / "eval_cache")
            info["eval_s"], info["eval_cpu_s"] = time.perf_counter() - t1, time.process_time() - c1
            per_method.setdefault(method, []).append(scores)
            sft_scores()
            run = {"method": method, "seed": seed, "split": args.split, "tasks": len(tasks), "tag": args.tag,
                   "config": args.config, "set": args.set, **info,
                   "greedy": row_of(compare(base["greedy"], scores["greedy"], n_boot=args.n_boot)),
                   "t1": row_of(compare(base["t1"], scores["t1"], n_boot=args.n_boot))}
            report["runs"][name] = run
            print(json.dumps(run), flush=True)
            if args.results:
                with open(args.results, "a") as f:
                    f.write(json.dumps(run) + "\n")
            (out / "report.json").write_text(json.dumps(report, indent=2))
    if not per_method:
        sft_scores()
    report["aa"] = aa_check(base, args.n_boot)
    report["methods"] = summarize(base, per_method, args.n_boot)
    report["between_methods"] = between_methods(per_method, args.n_boot)
    (out / "report.json").write_text(json.dumps(report, indent=2))
    print_table(report)


def aa_check(base: dict[str, TaskScores], n_boot: int) -> dict | None:
    """The evaluation's resolution without any training: the SFT model's T=1 sample 0 vs sample 1 on the
    same tasks (an A/A comparison; its interval should contain 0, its half-width is the noise floor of a
    one-sample paired comparison). `tasks_x_samples_for_0.01`: tasks x T=1 samples per task that bring
    the reward half-width of a paired comparison of two checkpoints' sample means to 0.01 (the within-
    task sampling variance is half the A/A difference's variance; pairing removes the between-task part)."""
    t1 = base["t1"]
    if t1.success.shape[1] < 2:
        return None
    out = {}
    for m in ("success", "reward"):
        x = t1.metric(m)
        iv = paired_bootstrap(x[:, 0], x[:, 1], n_boot=n_boot)
        sd = float(np.std(x[:, 1] - x[:, 0], ddof=1))
        out[m] = {"diff": iv.mean, "lo": iv.lo, "hi": iv.hi, "half_width": iv.half_width, "sd_diff": sd,
                  "tasks_x_samples_for_0.01": tasks_for_half_width(sd, 0.01)}
    print(f"A/A (SFT T=1 sample 0 vs 1, {len(t1.task_ids)} tasks): " + "; ".join(
        f"{m} {v['diff']:+.4f} [{v['lo']:+.4f}, {v['hi']:+.4f}] (half-width {v['half_width']:.4f}; tasks x samples "
        f"for a 0.01 half-width: {v['tasks_x_samples_for_0.01']})" for m, v in out.items()))
    return out


def final_models(run_dir: Path) -> tuple[Path, Path | None]:
    """(act or shared policy dir, rehearse dir or None) of a finished run's newest checkpoint."""
    from envace.trainers.checkpoint import latest_checkpoint

    ckpt = latest_checkpoint(run_dir / "checkpoints")
    if ckpt is None:
        raise SystemExit(f"{run_dir}: no checkpoint; the run did not finish (re-run it, or leave it out of --collect)")
    if (ckpt.path / "rehearse").is_dir():
        return ckpt.path / "act", ckpt.path / "rehearse"
    return ckpt.path / "policy", None


def collect(args, tasks, eval_seeds: list[int]) -> None:
    """One table from several invocations (e.g. one per method and seed, run in parallel): every run's
    per-task scores against the SFT's, all on the same tasks and seeds. Runs chosen on `val` are read on
    `--split test` here once: a run's checkpoint is scored on the split when its cache lacks it."""
    base = score_checkpoint(args.sft_dir / "model", None, tasks, eval_seeds, args.sft_dir / "eval_cache")
    report: dict = {"runs": {}}
    per_method: dict[str, list[dict[str, TaskScores]]] = {}
    collected: list[tuple[str, int, str, dict[str, TaskScores]]] = []  # (method[ (tag)], RL seed, where, scores)
    for d in args.collect:
        rep = json.loads((Path(d) / "report.json").read_text())
        for name, run in rep["runs"].items():
            if run.get("tasks") != len(tasks):
                continue
            run_dir = Path(d) / name
            act, reh = final_models(run_dir)
            scores = score_checkpoint(act, reh, tasks, eval_seeds, run_dir / "eval_cache")
            per_method.setdefault(run["method"], []).append(scores)
            label = f"{run['method']} ({run['tag']})" if run.get("tag") else run["method"]
            collected.append((label, int(run["seed"]), str(run_dir), scores))
            report["runs"][f"{Path(d).name}/{name}"] = {
                **run, "split": args.split,
                "greedy": row_of(compare(base["greedy"], scores["greedy"], n_boot=args.n_boot)),
                "t1": row_of(compare(base["t1"], scores["t1"], n_boot=args.n_boot))}
    report["methods"] = summarize(base, per_method, args.n_boot)
    report["between_methods"] = between_methods(per_method, args.n_boot)
    report["aa"] = aa_check(base, args.n_boot)
    print_table(report)
    table = seed_level_table(base, collected, args.n_boot, str(args.sft_dir / "model"))
    from envace.sweeps.paired_report import markdown_paired

    print(f"\nseed-level paired comparisons (one table per mode):\n{markdown_paired(table)}")
    report["seed_level"] = json.loads(table.to_json(orient="records"))  # NaN -> null
    Path(args.out).mkdir(parents=True, exist_ok=True)
    table.to_csv(Path(args.out) / f"collected_{args.split}_paired.csv", index=False)
    (Path(args.out) / f"collected_{args.split}.json").write_text(json.dumps(report, indent=2))


def seed_level_table(base: dict[str, TaskScores], runs: list[tuple[str, int, str, dict[str, TaskScores]]],
                     n_boot: int, sft_model: str):
    """The sweeps' seed-level table (envace.sweeps.paired_report.paired_table) of collected runs: the SFT model
    is every RL seed's base row (one SFT start), each method a trained arm; passes = modes (greedy, t1);
    contrasts: every pair of methods past the first (the first is the reference of the others)."""
    from envace.sweeps.paired_report import Cell, paired_table

    where: dict[tuple[str, int], str] = {}
    cells = [Cell(f"sft,seed={s}", "sft", "eval", 0, s, sft_model, dict(base)) for s in sorted({r[1] for r in runs})]
    for method, seed, run_dir, scores in runs:
        if (method, seed) in where:
            raise SystemExit(f"--collect: {method} RL seed {seed} is in {where[(method, seed)]} and in {run_dir}; "
                             "give the invocations different --tag values, or collect one of them")
        where[(method, seed)] = run_dir
        cells.append(Cell(f"{method},seed={seed}", method, "train", 0, seed, sft_model, dict(scores)))
    methods = list(dict.fromkeys(r[0] for r in runs))
    contrasts = [(b, a) for i, a in enumerate(methods[1:], 1) for b in methods[i + 1:]]
    return paired_table(cells, contrasts=contrasts, n_boot=n_boot)


def _pooled(runs: list[dict[str, TaskScores]], mode: str, metric: str) -> np.ndarray:
    """Per task: the mean over runs (RL seeds) of each run's per-task mean score."""
    return np.mean([r[mode].metric(metric).mean(axis=1) for r in runs], axis=0)


def summarize(base: dict[str, TaskScores], per_method: dict[str, list[dict[str, TaskScores]]], n_boot: int) -> dict:
    """Per method and metric: the change pooled over RL seeds (per-task mean over the seeds' checkpoints,
    paired bootstrap vs SFT) and mean ± t interval of the per-seed changes."""
    out = {}
    for method, runs in per_method.items():
        m = {}
        for mode in ("greedy", "t1"):
            for metric in ("success", "reward"):
                b = base[mode].metric(metric)
                per_seed = [r[mode].metric(metric).mean() - b.mean() for r in runs]
                pooled = _pooled(runs, mode, metric)
                boot = paired_bootstrap(b, pooled, n_boot=n_boot)
                seeds_iv = mean_interval(np.array(per_seed)) if len(per_seed) > 1 else None
                m[f"{mode}.{metric}"] = {"sft": float(b.mean()), "pooled_diff": boot.mean, "boot_lo": boot.lo,
                                        "boot_hi": boot.hi, "per_seed": [float(x) for x in per_seed],
                                        "seeds_lo": seeds_iv.lo if seeds_iv else None,
                                        "seeds_hi": seeds_iv.hi if seeds_iv else None}
        out[method] = m
    return out


def between_methods(per_method: dict[str, list[dict[str, TaskScores]]], n_boot: int) -> dict:
    """The paper's directions as paired comparisons: for each pair of methods, the per-task difference of
    their seed-pooled scores (same tasks, same sampling seeds) with a paired bootstrap interval."""
    names = list(per_method)
    out = {}
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            row = {}
            for mode in ("greedy", "t1"):
                for metric in ("success", "reward"):
                    iv = paired_bootstrap(_pooled(per_method[b], mode, metric), _pooled(per_method[a], mode, metric),
                                          n_boot=n_boot)  # a - b
                    row[f"{mode}.{metric}"] = {"diff": iv.mean, "boot_lo": iv.lo, "boot_hi": iv.hi}
            out[f"{a} - {b}"] = row
    return out


def print_table(report: dict) -> None:
    runs = report["runs"]
    print(f"\n{'run':24} {'wall s':>7} {'train r 1st5→last5':>19}  Δ greedy success | Δ greedy reward | "
          f"Δ T=1 success | Δ T=1 reward | Δ pass@n   (paired bootstrap 95 % vs SFT)")
    for name, r in runs.items():
        def c(mode, key, r=r):
            x = r[mode].get(key)
            return f"{x['diff']:+.3f} [{x['boot_lo']:+.3f},{x['boot_hi']:+.3f}]" if x else "-"
        pk = next((k for k in r["t1"] if k.startswith("pass@")), None)
        print(f"{name:24} {r['wall_s']:7.0f} {r['train_reward_first5']:8.3f} → {r['train_reward_last5']:.3f}  "
              f"{c('greedy', 'success')} | {c('greedy', 'reward')} | {c('t1', 'success')} | {c('t1', 'reward')} | "
              f"{c('t1', pk) if pk else '-'}")
    print("\nper method (pooled over RL seeds: paired bootstrap; over seeds: mean ± t interval of per-seed changes):")
    for method, m in report.get("methods", {}).items():
        for key, v in m.items():
            seeds = f"; seeds [{v['seeds_lo']:+.3f}, {v['seeds_hi']:+.3f}]" if v["seeds_lo"] is not None else ""
            print(f"  {method:9} {key:15} SFT {v['sft']:.3f}  Δ {v['pooled_diff']:+.3f} "
                  f"[{v['boot_lo']:+.3f}, {v['boot_hi']:+.3f}]{seeds}")
    if report.get("between_methods"):
        print("\nbetween methods (seed-pooled, paired bootstrap 95 %):")
        for pair, row in report["between_methods"].items():
            print(f"  {pair:22} " + " | ".join(f"{k} {v['diff']:+.3f} [{v['boot_lo']:+.3f}, {v['boot_hi']:+.3f}]"
                                              for k, v in row.items()))


if __name__ == "__main__":
    main()
