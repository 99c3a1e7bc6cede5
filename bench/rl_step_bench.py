"""One RL step, envace embedded (engine + `policy_update`) vs TRL's GRPOTrainer, on the same work.

    .venv/bin/pip install --target /tmp/trl-target --no-deps trl==1.16.0    # once; never into .venv
    OMP_NUM_THREADS=1 .venv/bin/python bench/rl_step_bench.py --pairs 5
    OMP_NUM_THREADS=1 .venv/bin/python bench/rl_step_bench.py --pairs 3 --smollm2-layers 30 --prompts 4 --k 4

TRL is not a dependency of the project: it is imported from `--trl-target` (a `pip install --target`
directory; its own dependencies — accelerate, datasets, pandas, pyarrow — are already in the venv for
other reasons). Without it the script prints how to install it and exits 0.

Work per step, identical in both arms: the project's tiny Qwen3 (built in a temp dir by
`init_tiny_model`, one copy per arm, each arm keeps training its own copy; or with `--smollm2-layers` a
random-init model of SmolLM2-135M's architecture and the tiny tokenizer, as engine_bench_real.py builds it,
or `--model-dir`), `--prompts` x `--k` completions (default 8 x 8),
<= `--new` new tokens at T = 1 (top_p = 1, no top-k), stop at the end-of-turn token, a cheap reward on the
completion text, GRPO advantages (group mean and std), token-mean PPO-clip (eps 0.2; TRL loss_type "dapo"
is its global token mean), 2 micro-batches (of 32 rows at 8 x 8) with gradient accumulation, one AdamW
step (clip 1.0), fp32, no KL, one torch thread, one pinned core (`--core`, -1 to leave the affinity alone).
Each arm runs the attention it runs for a user: envace's loader switches a CPU model to
`envace.models.attention` (native grouped-query attention under a mask); TRL's arm keeps transformers' `sdpa`.
envace's step: `make_engine` (the fast engine on this model) generates all requests in one call,
then `envace.trainers.update.policy_update`. TRL's step: one optimizer step of `GRPOTrainer` (generation
with `model.generate` inside it), timed by a callback from step begin to step end.

Each arm runs in its own process, set up as its framework sets one up for a user: envace's through
`envace.cpu_threads.apply_thread_policy` (one torch thread; the allocator policy of `envace.cpu_memory`,
`--envace-allocator default` for glibc's default), TRL's with one torch thread and nothing else; both
processes pinned to the same core, one stepping at a time.
Wall time is the claim; process CPU time is printed beside it (steadier when other processes share the
core). Pairs run interleaved (the order alternates), after `--warmup` untimed steps of each arm (default
1); the script prints each pair's times and ratio, and the medians. Each step's time is split into
generation and the rest (TRL's generation is timed by wrapping its model's `generate`).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

MICRO = 2


def reward_of(text: str) -> float:
    """A cheap deterministic reward: share of digits and braces in the completion."""
    return sum(c.isdigit() or c in "{}" for c in text) / max(len(text), 1)


def build(tmp: Path, smollm2_layers: int = 0, model_dir: str | None = None):
    """(model dir, corpus): the tiny model, a random-init SmolLM2-135M-shape model `smollm2_layers` deep with the
    tiny tokenizer (engine_bench_real.build_smollm2_shape), or the local `model_dir`."""
    from envace.models.corpus import world_corpus
    from envace.models.tiny import TinyModelConfig, init_tiny_model

    corpus = list(world_corpus(300, seed=0))
    if model_dir:
        return Path(model_dir), corpus
    if smollm2_layers:
        import engine_bench_real  # bench/ is on the path when run as a script

        engine_bench_real.build_smollm2_shape(tmp, smollm2_layers, "tiny")
        return tmp / "smollm2-shape", corpus
    return init_tiny_model(corpus, tmp / "tiny", TinyModelConfig()), corpus


def prompt_texts(tok, corpus: list[str], n: int) -> list[str]:
    users = [" ".join(corpus[i * 4:(i + 1) * 4])[:600] for i in range(n)]
    return [tok.apply_chat_template([{"role": "user", "content": u}], tokenize=False, add_generation_prompt=True)
            for u in users]


class EnvaceArm:
    def __init__(self, model_dir: Path, texts: list[str], new: int, lr: float, k: int,
                 share_prompts: bool = True) -> None:
        from envace.engines.factory import engine_name, make_engine
        from envace.models.loading import load_policy
        from envace.trainers.config import AlgoConfig

        self.model, self.tok = load_policy(model_dir, device="cpu")
        self.engine = make_engine(self.model, self.tok, "cpu")
        if hasattr(self.engine, "share_prompts"):  # the fast engine: off = each row its own prompt K/V copy
            self.engine.share_prompts = share_prompts
        self.name = engine_name(self.engine)
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=lr, weight_decay=0.0)
        self.algo = AlgoConfig(advantage="grpo", norm_std=True, loss="ppo_clip", agg="token-mean",
                               grad_noise_scale=False)
        self.prompts = [self.tok.encode(t, add_special_tokens=False) for t in texts]
        self.new, self.k, self.calls = new, k, 0

    def step(self) -> tuple[float, float, float]:
        from envace.engines.base import GenRequest
        from envace.trainers.train_rows import TrainRow
        from envace.trainers.update import policy_update
        from envace.types import Role

        self.calls += 1
        t0, c0 = time.perf_counter(), time.process_time()
        k = self.k
        reqs = [GenRequest(p, temperature=1.0, max_new_tokens=self.new, seed=self.calls * 1000 + i * k + j)
                for i, p in enumerate(self.prompts) for j in range(k)]
        with torch.inference_mode():
            out = self.engine.generate(reqs)
        t_gen = time.perf_counter() - t0
        rewards = torch.tensor([reward_of(o.text) for o in out]).view(-1, k)
        adv = ((rewards - rewards.mean(1, keepdim=True)) / (rewards.std(1, keepdim=True) + 1e-4)).flatten()
        rows = [TrainRow.standalone(role=Role.ACT, prompt_ids=r.prompt_ids, response_ids=o.token_ids,
                                    old_logprobs=o.logprobs, temperature=1.0, prompt_index=n // k, trajectory_key=n,
                                    reward=float(rewards.flatten()[n]), advantage=float(adv[n]))
                for n, (r, o) in enumerate(zip(reqs, out))]
        policy_update(self.model, self.opt, rows, self.algo, pad_id=self.tok.pad_token_id,
                      micro_batch=len(rows) // MICRO, grad_clip=1.0)
        self.model.eval()
        return time.perf_counter() - t0, t_gen, time.process_time() - c0


class TrlArm:
    def __init__(self, model_dir: Path, texts: list[str], new: int, lr: float, k: int, out: Path) -> None:
        from datasets import Dataset
        from transformers import TrainerCallback
        from transformers.trainer_callback import PrinterCallback, ProgressCallback
        from trl import GRPOConfig, GRPOTrainer

        from envace.models.loading import load_policy

        self.model, self.tok = load_policy(model_dir, device="cpu")
        self.model.set_attn_implementation("sdpa")  # transformers' own attention, as TRL runs it
        arm = self

        class Timer(TrainerCallback):
            def on_step_begin(self, args, state, control, **kw):
                arm.t0, arm.c0, arm.t_gen = time.perf_counter(), time.process_time(), 0.0

            def on_step_end(self, args, state, control, **kw):
                arm.last, arm.cpu = time.perf_counter() - arm.t0, time.process_time() - arm.c0

        generate = self.model.generate

        def timed_generate(*a, **kw):
            t = time.perf_counter()
            try:
                return generate(*a, **kw)
            finally:
                arm.t_gen += time.perf_counter() - t

        self.model.generate = timed_generate
        cfg = GRPOConfig(output_dir=str(out), per_device_train_batch_size=len(texts) * k // MICRO,
                         gradient_accumulation_steps=MICRO, num_generations=k, max_completion_length=new,
                         temperature=1.0, top_p=1.0, top_k=0, beta=0.0, loss_type="dapo", epsilon=0.2,
                         num_iterations=1, scale_rewards="group", learning_rate=lr, weight_decay=0.0,
                         max_grad_norm=1.0, lr_scheduler_type="constant", warmup_steps=0, use_cpu=True,
                         bf16=False, fp16=False, max_steps=1, logging_steps=1000, report_to="none",
                         save_strategy="no", shuffle_dataset=False, disable_dropout=True, disable_tqdm=True,
                         dataloader_num_workers=0, seed=0)

        def reward(prompts, completions, **kw):
            return [reward_of(c) for c in completions]

        data = Dataset.from_list([{"prompt": t} for t in texts])
        self.trainer = GRPOTrainer(model=self.model, reward_funcs=reward, args=cfg, train_dataset=data,
                                   processing_class=self.tok, callbacks=[Timer()])
        for cb in (PrinterCallback, ProgressCallback):  # no per-call log lines
            self.trainer.remove_callback(cb)

    def step(self) -> tuple[float, float, float]:
        self.trainer.train()  # max_steps=1: one optimizer step over the prompts x k completions
        torch.set_num_threads(1)
        return self.last, self.t_gen, self.cpu


def arm_worker(kind: str, conn, core: int, args: tuple) -> None:
    """One arm in its own process, set up as its framework sets up a process for a user: envace's arm through
    envace.cpu_threads.apply_thread_policy (one torch thread, and envace.cpu_memory's allocator policy), TRL's
    with one torch thread and nothing else. Steps when told; answers each with (wall, generation, cpu)."""
    if core >= 0 and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {core})
    if kind == "envace":
        from envace.cpu_threads import apply_thread_policy

        apply_thread_policy(1)
        arm = EnvaceArm(*args)
        conn.send((arm.name, [len(p) for p in arm.prompts]))
    else:
        torch.set_num_threads(1)  # TRL comes from the parent's sys.path (--trl-target), which spawn passes on
        arm = TrlArm(*args)
        conn.send((sys.modules["trl"].__version__, []))
    while conn.recv() == "step":
        conn.send(arm.step())
    conn.send(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)  # peak resident memory, MiB


class ArmProcess:
    """An arm running in a child process (spawned: nothing of the parent's heap or threads carries over)."""

    def __init__(self, kind: str, core: int, args: tuple, env: dict[str, str]) -> None:
        import multiprocessing

        ctx = multiprocessing.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=arm_worker, args=(kind, child, core, args), daemon=True)
        saved = dict(os.environ)
        os.environ.update(env)  # the child's environment (spawn copies it at start)
        try:
            self.proc.start()
        finally:
            os.environ.clear()
            os.environ.update(saved)
        self.info = self._recv()

    def _recv(self):
        while not self.conn.poll(1.0):
            if not self.proc.is_alive():
                raise SystemExit(f"the arm's process exited with code {self.proc.exitcode} (its error is above)")
        return self.conn.recv()

    def step(self) -> tuple[float, float, float]:
        self.conn.send("step")
        return self._recv()

    def close(self) -> float | None:
        """Stop the process; its peak resident memory in MiB (None if it had already exited)."""
        peak = None
        if self.proc.is_alive():
            self.conn.send("stop")
            peak = self._recv()
        self.proc.join(timeout=30)
        return peak


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--new", type=int, default=64)
    ap.add_argument("--lr", type=float, default=1e-5)
    ap.add_argument("--core", type=int, default=0, help="pin the process to this core (-1: no pinning)")
    ap.add_argument("--trl-target", default="/tmp/trl-target")
    ap.add_argument("--share-prompts", choices=["on", "off"], default="on",
                    help="the fast engine's trunk cache for a prompt's K rows (off: the layout before it)")
    ap.add_argument("--warmup", type=int, default=1, help="untimed steps of each arm before the pairs")
    ap.add_argument("--envace-allocator", choices=["policy", "default"], default="policy",
                    help="envace's process with envace.cpu_memory's allocator policy, as its entry points run, or "
                         "with glibc's default (ENVACE_ALLOCATOR=default: the layout before the policy)")
    ap.add_argument("--prompts", type=int, default=8, help="prompts per step")
    ap.add_argument("--k", type=int, default=8, help="completions per prompt (GRPO's group)")
    model_src = ap.add_mutually_exclusive_group()
    model_src.add_argument("--smollm2-layers", type=int, default=0,
                           help="a random-init SmolLM2-135M-shape model this deep (30: the full model) with the tiny "
                                "tokenizer, in place of the tiny model")
    model_src.add_argument("--model-dir", help="a local HF model dir (e.g. `envace model import-smollm2`)")
    args = ap.parse_args()
    sys.path.append(args.trl_target)
    try:
        import trl  # noqa: F401
    except ImportError as e:
        print(f"SKIP: TRL is not importable ({e}). Install it outside the project's dependencies:\n"
              f"  .venv/bin/pip install --target {args.trl_target} --no-deps trl==1.16.0")
        return

    with tempfile.TemporaryDirectory() as tmp:
        model_dir, corpus = build(Path(tmp), args.smollm2_layers, args.model_dir)
        from envace.models.loading import load_policy

        _, tok = load_policy(model_dir, device="cpu")
        texts = prompt_texts(tok, corpus, args.prompts)
        from envace.cpu_threads import plan_threads, usable_cpus

        # envace's process gets the variables the `envace` command sets before torch loads; TRL's, none
        envace_env = {**plan_threads(os.environ, usable_cpus(), 1).env,
                      **({"ENVACE_ALLOCATOR": "default"} if args.envace_allocator == "default" else {})}
        envace = ArmProcess("envace", args.core,
                            (model_dir, texts, args.new, args.lr, args.k, args.share_prompts == "on"), envace_env)
        trl_arm = ArmProcess("trl", args.core,
                             (model_dir, texts, args.new, args.lr, args.k, Path(tmp) / "trl"), {})
        try:
            for _ in range(args.warmup):  # untimed
                envace.step(), trl_arm.step()
            rows = []
            for pair in range(args.pairs):
                arms = [("envace", envace), ("trl", trl_arm)]
                res = dict((name, arm.step()) for name, arm in (arms if pair % 2 == 0 else arms[::-1]))
                rows.append(res)
                (e, eg, ec), (t, tg, tc) = res["envace"], res["trl"]
                print(f"pair {pair}: envace {e:.3f} s (gen {eg:.3f}, rest {e - eg:.3f}; cpu {ec:.3f})  "
                      f"TRL {t:.3f} s (gen {tg:.3f}, rest {t - tg:.3f}; cpu {tc:.3f})  ratio envace/TRL "
                      f"{e / t:.3f} (cpu {ec / tc:.3f})", flush=True)
        finally:
            peaks = envace.close(), trl_arm.close()
    med = {k: statistics.median(r[k][0] for r in rows) for k in ("envace", "trl")}
    gen = {k: statistics.median(r[k][1] for r in rows) for k in ("envace", "trl")}
    (engine, lens), (trl_version, _) = envace.info, trl_arm.info
    print(f"prompt tokens {min(lens)}-{max(lens)}, envace engine: {engine}, torch {torch.__version__}, "
          f"trl {trl_version}; peak resident memory: envace {peaks[0]:.0f} MiB, TRL {peaks[1]:.0f} MiB")
    print(f"median step: envace {med['envace']:.3f} s (generation {gen['envace']:.3f}, rest "
          f"{med['envace'] - gen['envace']:.3f})  TRL {med['trl']:.3f} s (generation {gen['trl']:.3f}, rest "
          f"{med['trl'] - gen['trl']:.3f})")
    print(f"median of pair ratios envace/TRL: {statistics.median(r['envace'][0] / r['trl'][0] for r in rows):.3f}  "
          f"(ratio of medians {med['envace'] / med['trl']:.3f}; target <= 0.2); process CPU time: "
          f"{statistics.median(r['envace'][2] / r['trl'][2] for r in rows):.3f}")


if __name__ == "__main__":
    main()
