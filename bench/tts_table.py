"""The test-time-rehearsal table on the built-in tool world: base (SFT only) vs trained (SFT + EnvACE RL),
N ∈ {0, 1, 2, 3} private rehearsals × {parallel, sequential}, several seeds, mean ± 95 % CI (Student t
over seeds) of end-state success and checklist reward, and the score-vs-N plot.

Everything is built here, on CPU, at a small budget: a tiny Qwen3-architecture model, SFT cold start,
a few EnvACE RL steps, then one `evaluate_world` per (model, N, mode, seed) cell with the REAL environment
(greedy committed run: with the default commit temperature the commit uses the evaluation's Act
temperature, 0; the private phase samples at 1.0, so seeds differ through the rehearsals only). The
report is written by envace.sweeps.tts_report, the same code the TTS sweep flow uses.

    OMP_NUM_THREADS=1 .venv/bin/python bench/tts_table.py --out /tmp/tts_table
    (--sft-steps 300 --rl-steps 6 --tasks 12 --seeds 0,1,2 --n 0,1,2,3 --memory prose by default;
    --sft-model / --rl-model reuse existing model dirs)
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from envace.tts.config import DEFAULT_N_GRID


def _say(msg: str) -> None:
    print(f"[tts-table {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def build_models(out: Path, sft_steps: int, rl_steps: int, seed: int) -> tuple[Path, Path]:
    from envace.data.config import DataConfig
    from envace.models.corpus import world_corpus
    from envace.models.tiny import TinyModelConfig, init_tiny_model
    from envace.trainers.checkpoint import latest_checkpoint
    from envace.trainers.config import SFTConfig, TrainConfig
    from envace.trainers.embedded import train
    from envace.trainers.sft import sft

    tiny = init_tiny_model(world_corpus(300, seed=seed), out / "tiny", TinyModelConfig(seed=seed))
    _say(f"SFT {sft_steps} steps")
    sft(SFTConfig(model=str(tiny), out_dir=str(out / "sft"), steps=sft_steps, seed=seed, threads=1,
                  progress=False, data=DataConfig(n_tasks=1000, seed=seed)))
    sft_model = out / "sft" / "model"
    _say(f"EnvACE RL {rl_steps} steps")
    train(TrainConfig.model_validate({
        "model": str(sft_model), "out_dir": str(out / "rl"), "steps": rl_steps, "prompts_per_step": 8, "k": 4,
        "save_every": rl_steps, "seed": seed, "optim": {"lr": 1e-4}, "data": {"n_tasks": 2000, "seed": seed + 1},
        "rollout": {"mode": "rehearse"}, "tracking": {"enabled": False}}))
    return sft_model, latest_checkpoint(out / "rl" / "checkpoints").model_dir("policy")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="runs/tts_table")
    ap.add_argument("--sft-steps", type=int, default=300)
    ap.add_argument("--rl-steps", type=int, default=6)
    ap.add_argument("--sft-model", default=None)
    ap.add_argument("--rl-model", default=None)
    ap.add_argument("--tasks", type=int, default=12)
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--memory", default="prose", help="TTS memory strategy (envace.tts.strategies)")
    ap.add_argument("--n", default=",".join(map(str, DEFAULT_N_GRID)))
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    import torch

    from envace.data.tasks import load_tasks
    from envace.engines.hf import HFEngine
    from envace.evaluation.config import EvalConfig
    from envace.evaluation.world import evaluate_world
    from envace.models.loading import load_policy
    from envace.sweeps.results import summarize
    from envace.sweeps.tts_report import tts_markdown, tts_rows, write_tts_report
    from envace.tts.config import TTSConfig

    torch.set_num_threads(1)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    if args.sft_model and args.rl_model:
        models = {"base": Path(args.sft_model), "trained": Path(args.rl_model)}
    else:
        sft_model, rl_model = build_models(out, args.sft_steps, args.rl_steps, args.seed)
        models = {"base": sft_model, "trained": rl_model}
    t_models = time.perf_counter() - t0
    ecfg = EvalConfig(model="-", n_tasks=args.tasks)
    tasks = load_tasks(ecfg.data, split="test", n=args.tasks)
    seeds = [int(s) for s in args.seeds.split(",")]
    ns = [int(n) for n in args.n.split(",")]
    records = []
    for name, path in models.items():
        model, tok = load_policy(path)
        engine = HFEngine(model, tok)
        for n in ns:
            for mode in (["parallel"] if n == 0 else ["parallel", "sequential"]):
                for seed in seeds:
                    t = time.perf_counter()
                    r = evaluate_world(engine, tasks, ecfg.rollout, seeds=[seed], with_fidelity=False,
                                       tts=TTSConfig(n=n, mode=mode, memory=args.memory))
                    records.append({"group": f"model={name},tts.n={n},tts.mode={mode}", "seed": seed,
                                    "cell": f"{name}-{n}-{mode}-{seed}",
                                    "levels": {"model": name, "tts.n": n, "tts.mode": mode},
                                    "metrics": {"eval/world/success": r["success"], "eval/world/reward": r["reward"]}})
                    _say(f"{name} N={n} {mode} seed={seed}: success {r['success']:.3f} reward {r['reward']:.3f} "
                         f"({time.perf_counter() - t:.0f} s)")
    table = summarize(records, ["model", "tts.n", "tts.mode"], ["eval/world/success", "eval/world/reward"])
    paths = write_tts_report(out, table)
    (out / "cells.json").write_text(json.dumps(records, indent=1))
    rows = tts_rows(table)
    print(f"\n{len(tasks)} held-out tool-world tasks, seeds {seeds}; models from {models}; "
          f"model build {t_models:.0f} s, total {time.perf_counter() - t0:.0f} s")
    for metric in ("eval/world/success", "eval/world/reward"):
        print(f"\n{metric} (mean ± 95% CI half-width over seeds)\n{tts_markdown(rows, metric)}")
    print(f"\nwritten: {', '.join(str(p) for p in paths.values())}")


if __name__ == "__main__":
    main()
