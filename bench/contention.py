"""How much a busy neighbour slows the demo's SFT step and an RL step, under several thread policies: each
scenario's timed job alternates steps with its neighbour running and stopped, and prints the ratio.

    flock /tmp/envace-heavy.lock nice -n 5 .venv/bin/python bench/contention.py [--work sft rl] \
        [--policies legacy envace] [--rounds 1] [--steps 6]

Work (one process per job, each its own Python; the model is the demo's tiny Qwen3, built once and
cached under --cache):
- `sft`: one step of the demo's SFT (16 sequences drawn as `envace.trainers.sft` draws them, forward,
  masked cross-entropy, backward, clip, AdamW), as `envace sft` runs it: at more than one torch thread in
  one thread shard per torch thread (`SFTConfig.shards`), else in one pass;
- `rl`: one embedded RL step (`make_engine` generates prompts x k completions at T=1, then
  `envace.trainers.update.policy_update`).
Neighbours (scenarios):
- `busy`: a pure-Python busy loop (nice 10, as a user's unrelated job);
- `torch1`: a second torch process at one thread (nice 10; the SFT step in a loop, as an
  `envace eval ... threads=1` would be);
- `stream1`: a one-thread torch process that streams a 512 MB weight matrix through matrix-vector
  products in a loop (nice 10; the memory traffic of decoding a ~135 M-parameter float32 model such as
  SmolLM2, without its compute), to tell memory-bandwidth and cache contention from CPU contention;
- `pair`: a second process of the same work at the policy's default threads (two jobs a user started);
- `cells`: both processes as a sweep with `max_workers: 2` starts its cells (ENVACE_CPU_JOBS=2 in their
  environment; `legacy` ignores it, as sweeps did before they set it).
Paired timing: after warm-up the timed job takes 2 x `--steps` steps in the order alone, beside, beside,
alone, ...; for an `alone` step every neighbour is stopped (SIGSTOP), for a `beside` step resumed
(SIGCONT). The slowdown is the median beside step over the median alone step of the same process, so
load from other users of the machine that drifts during the run hits both phases alike (the machine
these numbers come from may be shared: the load average is printed beside every line).
Policies: `legacy` is torch's default (threads = cores, OpenMP's default spin-then-sleep waiting), what
an envace entry point ran with before it had a thread policy; `envace` is
`envace.cpu_threads.apply_thread_policy()` before torch is imported (what every envace entry point runs);
`t1` / `passive` / `t1-passive` are single changes that isolate the mechanism (one thread;
OMP_WAIT_POLICY=PASSIVE; both).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = ("busy", "torch1", "stream1", "pair", "cells")
POLICIES = {  # name -> environment given to the job before Python starts, and whether it runs the envace policy
    "legacy": ({}, False),
    "envace": ({}, True),
    "t1": ({"ENVACE_BENCH_THREADS": "1"}, False),
    "passive": ({"OMP_WAIT_POLICY": "PASSIVE"}, False),
    "t1-passive": ({"ENVACE_BENCH_THREADS": "1", "OMP_WAIT_POLICY": "PASSIVE"}, False),
    "spin30k": ({"GOMP_SPINCOUNT": "30000"}, True),  # the envace policy, threads spinning up to 30 000 iterations first
}
THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME",
               "ENVACE_CPU_JOBS", "ENVACE_BENCH_THREADS")


# ----- jobs (run in their own process: `contention.py job SPEC_JSON`) ------------------------------------

def _build_model(cache: Path) -> Path:
    from envace.models.corpus import world_corpus
    from envace.models.tiny import TinyModelConfig, init_tiny_model

    model = cache / "tiny"
    if not (model / "config.json").is_file():
        init_tiny_model(world_corpus(600, seed=0), model, TinyModelConfig(seed=0))  # the demo's model
    return model


class SFTWork:
    def __init__(self, model_dir: Path) -> None:
        import random

        import torch

        from envace.data.config import DataConfig
        from envace.data.tasks import load_tasks
        from envace.models.loading import load_policy
        from envace.trainers.config import SFTConfig
        from envace.trainers.sft import BatchDrawer
        from envace.trainers.sft_samples import build_samples

        self.cfg = SFTConfig(model=str(model_dir), data=DataConfig(n_tasks=300, seed=0))
        self.model, self.tok = load_policy(model_dir, device="cpu")
        self.acts, self.rehs = build_samples(load_tasks(self.cfg.data), self.tok, self.cfg)
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-4)
        self.draw = BatchDrawer(self.acts, self.rehs, self.cfg, random.Random(0))
        self.model.train()
        shards = min(self.cfg.shards or torch.get_num_threads(), self.cfg.batch_size)  # as envace.trainers.sft
        self.runner = None
        if shards > 1:
            from envace.thread_shards import ShardRunner

            self.runner = ShardRunner(shards)
            torch.set_num_threads(1)  # the shards are the parallelism, as inside `sft`'s loop

    def step(self) -> None:
        import torch

        from envace.trainers.sft import batch_loss, sharded_batch_grads

        if self.runner is None:
            loss, _ = batch_loss(self.model, self.draw(), self.tok.pad_token_id, self.cfg.share_prefix)
            self.opt.zero_grad(set_to_none=True)
            loss.backward()
        else:
            sharded_batch_grads(self.model, self.draw(), self.tok.pad_token_id, self.cfg.share_prefix, self.runner)
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.opt.step()


class RLWork:
    def __init__(self, model_dir: Path, prompts: int = 8, k: int = 4, new: int = 48) -> None:
        import torch

        from envace.engines.factory import make_engine
        from envace.models.corpus import world_corpus
        from envace.models.loading import load_policy
        from envace.trainers.config import AlgoConfig

        self.model, self.tok = load_policy(model_dir, device="cpu")
        self.engine = make_engine(self.model, self.tok, "cpu")
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-5, weight_decay=0.0)
        self.algo = AlgoConfig(advantage="grpo", norm_std=True, loss="ppo_clip", agg="token-mean",
                               grad_noise_scale=False)
        corpus = list(world_corpus(100, seed=1))
        users = [" ".join(corpus[i * 4:(i + 1) * 4])[:600] for i in range(prompts)]
        self.prompts = [self.tok.encode(self.tok.apply_chat_template([{"role": "user", "content": u}], tokenize=False,
                                                                     add_generation_prompt=True),
                                        add_special_tokens=False) for u in users]
        self.k, self.new, self.calls = k, new, 0

    def step(self) -> None:
        import torch

        from envace.engines.base import GenRequest
        from envace.trainers.train_rows import TrainRow
        from envace.trainers.update import policy_update
        from envace.types import Role

        self.calls += 1
        k = self.k
        reqs = [GenRequest(p, temperature=1.0, max_new_tokens=self.new, seed=self.calls * 1000 + i * k + j)
                for i, p in enumerate(self.prompts) for j in range(k)]
        self.model.eval()
        with torch.inference_mode():
            out = self.engine.generate(reqs)
        rewards = torch.tensor([sum(c.isdigit() for c in o.text) / max(len(o.text), 1) for o in out]).view(-1, k)
        adv = ((rewards - rewards.mean(1, keepdim=True)) / (rewards.std(1, keepdim=True) + 1e-4)).flatten()
        rows = [TrainRow.standalone(role=Role.ACT, prompt_ids=r.prompt_ids, response_ids=o.token_ids,
                                    old_logprobs=o.logprobs, temperature=1.0, prompt_index=n // k, trajectory_key=n,
                                    reward=float(rewards.flatten()[n]), advantage=float(adv[n]))
                for n, (r, o) in enumerate(zip(reqs, out))]
        policy_update(self.model, self.opt, rows, self.algo, pad_id=self.tok.pad_token_id, micro_batch=16,
                      grad_clip=1.0)


def run_job(spec: dict) -> None:
    """Warm up and say ready. A neighbour then steps until killed. The timed job waits for the go file, then
    takes `2 * steps` steps in the order alone, beside, beside, alone, ... (the neighbours stopped with SIGSTOP
    for an `alone` step, resumed with SIGCONT for a `beside` step), so machine load that drifts during the run
    hits both phases alike; it writes both phases' wall and process CPU times."""
    ready, go, result = Path(spec["ready"]), Path(spec["go"]), spec.get("result")
    if spec["work"] == "busy":
        ready.touch()
        while True:
            pass
    if spec["work"] == "stream":
        import torch

        torch.set_num_threads(1)
        w, x = torch.randn(8192, 16384), torch.randn(16384)
        ready.touch()
        while True:
            torch.mv(w, x)
    if spec.get("policy"):
        from envace.cpu_threads import apply_thread_policy

        apply_thread_policy()
    import torch

    if os.environ.get("ENVACE_BENCH_THREADS"):
        torch.set_num_threads(int(os.environ["ENVACE_BENCH_THREADS"]))
    sys.path.insert(0, str(ROOT))
    work = (SFTWork if spec["work"] == "sft" else RLWork)(Path(spec["model"]))
    for _ in range(spec["warmup"]):
        work.step()
    ready.touch()
    if not result:
        while True:
            work.step()
    while not go.exists():
        time.sleep(0.02)
    pids = json.loads(go.read_text())
    out: dict[str, dict[str, list[float]]] = {p: {"wall": [], "cpu": []} for p in ("alone", "beside")}
    for i in range(2 * spec["steps"]):
        phase = "beside" if i % 4 in (1, 2) else "alone"
        for pid in pids:
            os.killpg(pid, signal.SIGCONT if phase == "beside" else signal.SIGSTOP)
        time.sleep(0.05)
        t0, c0 = time.perf_counter(), time.process_time()
        work.step()
        out[phase]["wall"].append(time.perf_counter() - t0)
        out[phase]["cpu"].append(time.process_time() - c0)
    for pid in pids:
        os.killpg(pid, signal.SIGCONT)
    runner = getattr(work, "runner", None)  # SFT in thread shards: one thread per shard, one torch thread each
    Path(result).write_text(json.dumps({**out, "threads": runner.n_threads if runner else torch.get_num_threads(),
                                        "env": {k: os.environ.get(k) for k in THREAD_VARS}}))


# ----- scenarios (the parent) ---------------------------------------------------------------------------

def _env(policy: str, extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in THREAD_VARS}  # the bench's own 1-thread caps stay out
    env.update(POLICIES[policy][0])
    env.update(extra)
    env["PYTHONPATH"] = str(ROOT)
    return env


def run_scenario(work: str, policy: str, scenario: str, args, tmp: Path) -> dict:
    """The timed job's result: {"alone"|"beside": {"wall"|"cpu": [s per step]}, "threads": n, "env": {...}}."""
    cells = {"ENVACE_CPU_JOBS": "2"} if scenario == "cells" else {}
    neighbour = {"busy": ("busy", "legacy", 10, {}), "torch1": ("sft", "t1", 10, {}),
                 "stream1": ("stream", "t1", 10, {}), "pair": (work, policy, 0, {}),
                 "cells": (work, policy, 0, cells)}[scenario]
    jobs = [(*neighbour, False), (work, policy, 0, cells, True)]
    tag = f"{work}-{policy}-{scenario}-{time.monotonic_ns()}"
    go, result = tmp / f"{tag}.go", tmp / f"{tag}.json"
    procs, readies = [], []
    try:
        for i, (w, pol, nice, extra, timed) in enumerate(jobs):
            spec = {"work": w, "policy": POLICIES[pol][1], "model": str(args.model), "warmup": args.warmup,
                    "steps": args.steps, "ready": str(tmp / f"{tag}.{i}.ready"), "go": str(go),
                    "result": str(result) if timed else None}
            readies.append(Path(spec["ready"]))
            procs.append(subprocess.Popen([sys.executable, __file__, "job", json.dumps(spec)], env=_env(pol, extra),
                                          preexec_fn=(lambda n=nice: os.nice(n)) if nice else None,
                                          start_new_session=True))
        deadline = time.monotonic() + args.job_timeout
        while not all(r.exists() for r in readies):
            _check(procs, deadline)
            time.sleep(0.1)
        go.write_text(json.dumps([p.pid for p in procs[:-1]]))
        while not result.exists():
            _check(procs, deadline)
            time.sleep(0.1)
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGCONT)
                os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    return json.loads(result.read_text())


def _check(procs, deadline: float) -> None:
    for p in procs:
        if p.poll() is not None:
            raise RuntimeError(f"a bench job exited with status {p.returncode} before it finished; see its stderr")
    if time.monotonic() > deadline:
        raise RuntimeError("a scenario ran past --job-timeout")


def med(xs: list[float]) -> float:
    return statistics.median(xs)


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "job":
        run_job(json.loads(sys.argv[2]))
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--work", nargs="+", default=["sft", "rl"], choices=["sft", "rl"])
    ap.add_argument("--policies", nargs="+", default=["legacy", "envace"], choices=list(POLICIES))
    ap.add_argument("--scenarios", nargs="+", default=list(SCENARIOS), choices=SCENARIOS)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--steps", type=int, default=6, help="timed steps per phase (alone, beside) of a scenario")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--job-timeout", type=float, default=900.0)
    ap.add_argument("--cache", default="/tmp/envace_contention")
    args = ap.parse_args()
    cache = Path(args.cache)
    cache.mkdir(parents=True, exist_ok=True)
    sys.path.insert(0, str(ROOT))
    args.model = _build_model(cache)
    print(f"cores {os.cpu_count()}, load average at start {os.getloadavg()[0]:.2f} (other processes share the "
          f"machine unless it is ~0)", flush=True)
    res: dict[tuple[str, str, str], list[dict]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for rnd in range(args.rounds):
            for work in args.work:
                for policy in args.policies:
                    for scenario in args.scenarios:
                        r = run_scenario(work, policy, scenario, args, Path(tmp))
                        res.setdefault((work, policy, scenario), []).append(r)
                        a, b = med(r["alone"]["wall"]), med(r["beside"]["wall"])
                        print(f"round {rnd} {work:3s} {policy:10s} {scenario:6s} threads {r['threads']}  alone "
                              f"{a:6.3f} s/step  beside {b:6.3f} s/step  x{b / a:5.2f}  (process CPU alone "
                              f"{med(r['alone']['cpu']):.3f}, beside {med(r['beside']['cpu']):.3f} s/step; load "
                              f"average {os.getloadavg()[0]:.1f})", flush=True)
    print("\nslowdown = beside / alone, the same process's paired steps (median over rounds); kept = the policy's solo "
          "speed kept beside the neighbour, solo = the policy's default-threads job alone (the alone steps of its "
          "`pair` scenario; for `cells` this compares a 1-thread cell with a full-machine solo run)")
    for work in args.work:
        for policy in args.policies:
            solo = (med([med(r["alone"]["wall"]) for r in res[(work, policy, "pair")]])
                    if "pair" in args.scenarios else None)
            cells = []
            for scenario in args.scenarios:
                rs = res[(work, policy, scenario)]
                slow = med([med(r["beside"]["wall"]) / med(r["alone"]["wall"]) for r in rs])
                beside = med([med(r["beside"]["wall"]) for r in rs])
                kept = f", kept {100 * solo / beside:.0f}%" if solo else ""
                cells.append(f"{scenario} x{slow:.2f}{kept}")
            print(f"{work:3s} {policy:10s} " + " | ".join(cells) + (f"  (solo {solo:.3f} s/step)" if solo else ""))


if __name__ == "__main__":
    main()
