"""An embedded RL step, old code vs new code, on the same work: an `envace.yaml` rehearse-mode step and a
`grpo_env.yaml` env-mode step (configs/train/), same model, same seeds, one torch thread (`--threads N`:
N in both arms, with the passive OpenMP wait policy an envace command sets).

Baseline: commit 493d05d (before the fast engine and the packed update), checked out with `git worktree
add` under /tmp and run in a subprocess with its own PYTHONPATH; the new arm is another worktree of the
committed HEAD (`--new .` runs the working tree instead). Arms alternate old, new, old, new ... per
config (interleaved, so machine load hits both alike). Each run trains `--steps` steps from the same
start model; the worker times `update_models` (the policy update) and reads each step's total time and
rollout time from the trainer's own history. Printed: every step's times, then per config the median
over steps 2.. of all repeats and the old / new ratios of update time and total step time.

Model: a tiny Qwen3-architecture model given a short SFT (`--sft-steps`, default 300 x 16 sequences)
so that generations have realistic lengths (a random model's garbage lengths say nothing about the
update); built once with the new code's `envace sft` API and cached under /tmp/envace_step_bench (it
is cheaper than the demo's 1400-step SFT and is not a good policy; only its lengths matter here).
Same work in both arms: where the new code has them, the rehearsal shadow monitor is off and the
rollout keeps the old defaults (rehearse_style=compact; invalid Act calls end a rehearse-mode episode
and are observed in env mode), since the new defaults change what a step generates and trains on.

    OMP_NUM_THREADS=1 .venv/bin/python bench/step_speedup.py [--steps 3] [--repeats 2] [--prompts 8 --k 4]
    .venv/bin/python bench/step_speedup.py --old e519643 --threads 2   # both arms at 2 threads (passive wait)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CACHE = Path("/tmp/envace_step_bench")
OLD_REV = "493d05d"
CONFIGS = {"envace": "configs/train/envace.yaml", "grpo_env": "configs/train/grpo_env.yaml"}


def _worktree(rev: str) -> Path:
    """A worktree of `rev` under the cache dir (re-used when it is already at that commit)."""
    sha = subprocess.run(["git", "rev-parse", rev], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()
    path = CACHE / f"tree_{sha[:10]}"
    if not (path / "envace").is_dir():
        CACHE.mkdir(parents=True, exist_ok=True)
        subprocess.run(["git", "worktree", "add", "--detach", str(path), sha], cwd=ROOT, check=True,
                       capture_output=True)
    return path


def _sft_model(steps: int) -> Path:
    """The cached SFT'd tiny model (built with this tree's code on first use)."""
    out = CACHE / f"sft_{steps}"
    model = out / "model"
    if (model / "model.safetensors").is_file():
        return model
    sys.path.insert(0, str(ROOT))
    import torch

    from envace.data.config import DataConfig
    from envace.models.corpus import world_corpus
    from envace.models.tiny import TinyModelConfig, init_tiny_model
    from envace.trainers.config import SFTConfig
    from envace.trainers.sft import sft

    torch.set_num_threads(1)
    t0 = time.perf_counter()
    tiny = init_tiny_model(world_corpus(600, seed=0), out / "tiny", TinyModelConfig(seed=0))
    sft(SFTConfig(model=str(tiny), out_dir=str(out), steps=steps, seed=0, threads=1, progress=False,
                  data=DataConfig(n_tasks=1000, seed=0)))
    print(f"# built SFT model {model} in {time.perf_counter() - t0:.0f} s", flush=True)
    return model


WORKER = r"""
import json, sys, time
from pathlib import Path
import torch
tree, cfg_path, out_dir, overrides = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
threads = int(sys.argv[5])
import envace
assert Path(envace.__file__).resolve().is_relative_to(Path(tree).resolve()), envace.__file__
torch.set_num_threads(threads)
from envace.config import load_config
from envace.trainers.config import TrainConfig
import envace.trainers.embedded as emb
if "shadow_monitor" in TrainConfig.model_fields:
    overrides.append("shadow_monitor=false")  # extra work the old code does not do
from envace.config import RolloutConfig
if "history" in str(RolloutConfig.model_fields["rehearse_style"].annotation):
    overrides.append("rollout.rehearse_style=compact")  # the old default: same Rehearse prompts in both arms
if "invalid_call" in RolloutConfig.model_fields:  # the old per-mode rule: env observes, rehearse ends
    mode = load_config(TrainConfig, cfg_path, overrides + [f"out_dir={out_dir}"]).rollout.mode
    overrides.append(f"rollout.invalid_call={'observe' if mode == 'env' else 'end'}")
times = []
inner = emb.update_models
def timed(*a, **k):
    t = time.perf_counter(); out = inner(*a, **k); times.append(time.perf_counter() - t); return out
emb.update_models = timed
cfg = load_config(TrainConfig, cfg_path, overrides + [f"out_dir={out_dir}"])
res = emb.train(cfg)
steps = [{"step_s": h["time/step_s"], "rollout_s": h["time/rollout_s"], "update_s": u,
          "tokens": sum(v for k, v in h.items() if k.endswith("/response_tokens"))}
         for h, u in zip(res.history, times)]
print("RESULT " + json.dumps(steps))
"""


def run_arm(tree: Path, config: str, model: Path, args, tag: str) -> list[dict]:
    out = CACHE / "runs" / f"{tag}_{time.time_ns()}"
    overrides = [f"model={model}", f"steps={args.steps}", f"prompts_per_step={args.prompts}", f"k={args.k}",
                 f"threads={args.threads}", "progress=false", "tracking.enabled=false", f"save_every={args.steps + 1}",
                 f"seed={args.seed}"]
    env = {**os.environ, "PYTHONPATH": str(tree), "OMP_NUM_THREADS": str(args.threads),
           "MKL_NUM_THREADS": str(args.threads), "TOKENIZERS_PARALLELISM": "false",
           "OMP_WAIT_POLICY": "PASSIVE"}  # as an envace command runs (envace.cpu_threads)
    proc = subprocess.run([sys.executable, "-c", WORKER, str(tree), str(tree / config), str(out),
                           json.dumps(overrides), str(args.threads)], cwd=tree, env=env, capture_output=True,
                          text=True)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if proc.returncode or not lines:
        raise RuntimeError(f"{tag} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads(lines[-1][len("RESULT "):])


def _median(runs: list[list[dict]], key: str) -> float:
    vals = [s[key] for run in runs for s in run[1:]] or [s[key] for run in runs for s in run]
    return statistics.median(vals)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=3, help="RL steps per run (step 1 is reported, not in medians).")
    ap.add_argument("--repeats", type=int, default=2, help="Interleaved old/new run pairs per config.")
    ap.add_argument("--prompts", type=int, default=8, help="prompts_per_step (configs: 8).")
    ap.add_argument("--k", type=int, default=4, help="Trajectories per prompt (configs: 4).")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1, help="torch threads of both arms (the new code runs thread "
                                                          "shards at more than one).")
    ap.add_argument("--sft-steps", type=int, default=300, help="SFT steps of the cached start model.")
    ap.add_argument("--old", default=OLD_REV, help="Baseline commit.")
    ap.add_argument("--new", default="HEAD", help="New commit, or '.' for the working tree.")
    ap.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    args = ap.parse_args(argv)
    model = _sft_model(args.sft_steps)
    trees = {"old": _worktree(args.old), "new": ROOT if args.new == "." else _worktree(args.new)}
    print(f"# old = {args.old} ({trees['old']}), new = {args.new} ({trees['new']}); model {model}; "
          f"{args.prompts} prompts x K={args.k}, {args.steps} steps/run, {args.threads} thread(s)", flush=True)
    summary = {}
    for name in args.configs:
        runs: dict[str, list[list[dict]]] = {"old": [], "new": []}
        for rep in range(args.repeats):
            for arm in ("old", "new"):
                steps = run_arm(trees[arm], CONFIGS[name], model, args, f"{name}_{arm}_{rep}")
                runs[arm].append(steps)
                for i, s in enumerate(steps, 1):
                    print(f"{name:9s} {arm} rep {rep} step {i}: step {s['step_s']:6.2f} s  rollout "
                          f"{s['rollout_s']:6.2f} s  update {s['update_s']:6.2f} s  response tokens "
                          f"{s['tokens']:.0f}", flush=True)
        med = {arm: {k: _median(r, k) for k in ("step_s", "rollout_s", "update_s")} for arm, r in runs.items()}
        ratios = {k: med["old"][k] / med["new"][k] for k in ("update_s", "step_s", "rollout_s")}
        summary[name] = {"median": med, "old_over_new": ratios}
        print(f"{name:9s} median old: step {med['old']['step_s']:.2f} s (update {med['old']['update_s']:.2f}, "
              f"rollout {med['old']['rollout_s']:.2f}) | new: step {med['new']['step_s']:.2f} s (update "
              f"{med['new']['update_s']:.2f}, rollout {med['new']['rollout_s']:.2f})", flush=True)
        print(f"{name:9s} speed-up old/new: update {ratios['update_s']:.2f}x  rollout {ratios['rollout_s']:.2f}x  "
              f"total step {ratios['step_s']:.2f}x", flush=True)
    print("SUMMARY " + json.dumps(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
