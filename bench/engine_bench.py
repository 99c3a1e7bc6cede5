"""Generation speed: the fast engine vs HFEngine vs plain `model.generate`, against the CPU's matmul roof.

    OMP_NUM_THREADS=1 taskset -c 0 .venv/bin/python bench/engine_bench.py            # 64 x 40 from ~200 tokens
    OMP_NUM_THREADS=1 .venv/bin/python bench/engine_bench.py --rows 16 --repeats 3   # quick
    OMP_NUM_THREADS=1 .venv/bin/python bench/engine_bench.py --model-dir models/smollm2-135m \
        --rows 8 --prompt-tokens 120 --new 32 --repeats 3          # a real model (`envace model import-smollm2`)

Work: `--rows` prompts of ~`--prompt-tokens` tokens (lengths vary +-10 %), `--new` new tokens each,
T = 1, top_p = 1, one torch thread, on the project's tiny model built in a temp dir by
`envace.models.tiny.init_tiny_model` (random weights; the speed does not depend on them), or the model in
`--model-dir` (any local HF dir, e.g. SmolLM2-135M; prompts are cut from the same tool-world text in its
tokenizer); `--arms` leaves arms out (model.generate, the baseline, always runs). At `--threads` > 1 the
fast engine runs in thread shards (its default there: one shard per thread, each at one torch thread) and
the arm `fast, 1 shard` runs it as one batch at all the threads. Every arm is
forced to produce exactly `--new` tokens (end-of-sequence ids disabled) so all do the same work. Arms
run interleaved (rotating order) `--repeats` times; the medians are compared in the same run.

Times are reported twice: wall clock (the claim) and process CPU time (steadier when other processes
share the cores; the roof is then measured with the same clock). Roof: the best single-thread float32
matmul rate measured in this run (N x N x N sgemm). Work: the FLOPs the generation needs (`model_flops`;
the last layer's attention output, MLP and the output layer only where logits are read; transformers'
forward, in HFEngine and model.generate, does more than this). "% of roof" = (work / roof) / time; in
brackets the same with the full-forward count (`forward_flops`, the count docs/performance.md's ~40 % uses).
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from pathlib import Path

import torch


def matmul_roof(n: int = 1024, reps: int = 5, clock=time.perf_counter) -> float:
    """Best float32 matmul GFLOP/s over `reps` n x n x n products, timed with `clock`."""
    a, b = torch.randn(n, n), torch.randn(n, n)
    a @ b
    best = float("inf")
    for _ in range(reps):
        t = clock()
        a @ b
        best = min(best, clock() - t)
    return 2 * n ** 3 / best / 1e9


def model_flops(cfg, prompt_lens: list[int], new: int) -> float:
    """FLOPs the work needs: every layer's q/k/v projection at every position (the cache needs K/V);
    attention, o_proj and the MLP at every position except in the last layer, where only the positions
    whose logits are read need them (each prompt's last token and each decode step), as does the output
    layer. Attention costs 4 x heads x head_dim per key seen."""
    h, kvh, hd, hid, inter, n_layers = (cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim,
                                        cfg.hidden_size, cfg.intermediate_size, cfg.num_hidden_layers)
    qkv = 2 * hid * (h + 2 * kvh) * hd
    rest = 2 * (h * hd * hid + 3 * hid * inter)  # o_proj + gate, up, down
    head = 2 * hid * cfg.vocab_size
    att = 4 * h * hd
    total = 0.0
    for n in prompt_lens:
        decode_keys = sum(range(n + 1, n + new))  # keys seen by the new - 1 decode steps
        total += qkv * n_layers * (n + new - 1)
        total += (n_layers - 1) * (rest * (n + new - 1) + att * (n * (n + 1) // 2 + decode_keys))
        total += rest * new + att * (n + decode_keys) + head * new
    return total


def forward_flops(cfg, prompt_lens: list[int], new: int) -> float:
    """The full-forward count: the full forward (every layer, every position) for each prompt token and each
    decode step, the output layer only where logits are read."""
    h, kvh, hd, hid, inter, n_layers = (cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim,
                                        cfg.hidden_size, cfg.intermediate_size, cfg.num_hidden_layers)
    linear = 2 * (hid * (h + 2 * kvh) * hd + h * hd * hid + 3 * hid * inter) * n_layers
    total = 0.0
    for n in prompt_lens:
        keys = n * (n + 1) // 2 + sum(range(n + 1, n + new))
        total += linear * (n + new - 1) + 2 * hid * cfg.vocab_size * new + 4 * h * hd * keys * n_layers
    return total


def build_model(tmp: Path, model_dir: str | None = None):
    from envace.models.corpus import world_corpus
    from envace.models.loading import load_policy
    from envace.models.tiny import TinyModelConfig, init_tiny_model

    corpus = list(world_corpus(300, seed=0))
    path = model_dir or init_tiny_model(corpus, tmp / "tiny", TinyModelConfig())
    model, tok = load_policy(path, device="cpu", dtype="float32")
    return model, tok, corpus


def make_prompts(tok, corpus: list[str], rows: int, target: int, seed: int = 0) -> list[list[int]]:
    rng = random.Random(seed)
    ids = tok.encode("\n".join(corpus), add_special_tokens=False)
    out = []
    for _ in range(rows):
        n = rng.randint(int(target * 0.9), int(target * 1.1))
        start = rng.randrange(0, len(ids) - n)
        out.append(ids[start:start + n])
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=64)
    ap.add_argument("--new", type=int, default=40)
    ap.add_argument("--prompt-tokens", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--model-dir", default=None, help="a local HF model dir (default: the tiny model)")
    ap.add_argument("--arms", nargs="+", default=["fast", "hf"], choices=["fast", "hf"],
                    help="engines timed beside model.generate")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    from envace.engines.base import GenRequest
    from envace.engines.fast import FastEngine
    from envace.engines.hf import HFEngine

    with tempfile.TemporaryDirectory() as tmp:
        model, tok, corpus = build_model(Path(tmp), args.model_dir)
    prompts = make_prompts(tok, corpus, args.rows, args.prompt_tokens)
    reqs = [GenRequest(p, temperature=1.0, max_new_tokens=args.new, seed=i) for i, p in enumerate(prompts)]
    fast = FastEngine(model, tok, device="cpu") if "fast" in args.arms else None  # thread shards at > 1 thread
    one_pass = FastEngine(model, tok, device="cpu", shards=1) if "fast" in args.arms and args.threads > 1 else None
    hf = HFEngine(model, tok, device="cpu")
    for engine in (fast, one_pass, hf):  # same work in every arm: exactly --new tokens per row
        if engine is not None:
            engine.stop_ids = set()

    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), tok.pad_token_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, p in enumerate(prompts):
        ids[i, width - len(p):], mask[i, width - len(p):] = torch.tensor(p), 1

    def run_fast() -> int:
        return sum(len(r.token_ids) for r in fast.generate(reqs))

    def run_one_pass() -> int:
        return sum(len(r.token_ids) for r in one_pass.generate(reqs))

    def run_hf() -> int:
        return sum(len(r.token_ids) for r in hf.generate(reqs))

    @torch.inference_mode()
    def run_generate() -> int:
        out = model.generate(input_ids=ids, attention_mask=mask, do_sample=True, temperature=1.0, top_p=1.0,
                             top_k=0, max_new_tokens=args.new, min_new_tokens=args.new, eos_token_id=None,
                             pad_token_id=tok.pad_token_id)
        return (out.shape[1] - width) * out.shape[0]

    arms = {"fast engine": run_fast, "fast, 1 shard": run_one_pass, "HFEngine": run_hf, "model.generate": run_generate}
    arms = {k: v for k, v in arms.items() if {"fast engine": "fast", "HFEngine": "hf"}.get(k, "base") in
            [*args.arms, "base"] and (k != "fast, 1 shard" or one_pass is not None)}
    for fn in arms.values():  # warm-up, untimed
        fn()
    clocks = {"wall": time.perf_counter, "cpu": time.process_time}
    times: dict[str, dict[str, list[float]]] = {c: {k: [] for k in arms} for c in clocks}
    roofs: dict[str, list[float]] = {c: [] for c in clocks}
    n_new = 0
    names = list(arms)
    for rep in range(args.repeats):
        for c, clock in clocks.items():
            roofs[c].append(matmul_roof(clock=clock))
        for name in names[rep % len(names):] + names[:rep % len(names)]:
            t0, c0 = time.perf_counter(), time.process_time()
            n_new = arms[name]()
            times["wall"][name].append(time.perf_counter() - t0)
            times["cpu"][name].append(time.process_time() - c0)
    flops = model_flops(model.config, [len(p) for p in prompts], args.new)
    full = forward_flops(model.config, [len(p) for p in prompts], args.new)
    print(f"model: {args.model_dir or 'the tiny model'} ({model.config.model_type}, "
          f"{sum(p.numel() for p in {id(p): p for p in model.parameters()}.values()) / 1e6:.1f} M parameters), "
          f"fast engine arithmetic {type(fast.kernel).__name__ if fast else '-'}")
    print(f"work: {len(prompts)} prompts of {min(map(len, prompts))}-{width} tokens, {args.new} new tokens each "
          f"({n_new} new tokens), {args.threads} thread(s), {args.repeats} interleaved repeats, "
          f"needed work {flops / 1e9:.2f} GFLOP (full forward count: {full / 1e9:.2f} GFLOP)")
    for c in clocks:  # wall time is the claim; CPU time is the steadier measure on a shared machine
        roof = statistics.median(roofs[c])
        print(f"[{c} time] roof {roof:.1f} GFLOP/s float32 matmul (median of per-repeat bests) "
              f"-> {flops / roof / 1e9 * 1e3:.0f} ms at roof")
        base = statistics.median(times[c]["model.generate"])
        for name in names:
            med = statistics.median(times[c][name])
            print(f"  {name:15s} median {med * 1e3:7.1f} ms  {n_new / med:8.0f} new tok/s  "
                  f"{flops / roof / 1e9 / med * 100:5.1f} % of roof ({full / roof / 1e9 / med * 100:4.1f} % by "
                  f"full forward)  x{base / med:.2f} vs model.generate  "
                  f"(all: {', '.join(f'{t * 1e3:.0f}' for t in times[c][name])} ms)")
        if "HFEngine" in arms and "fast engine" in arms:
            ratio = statistics.median(times[c]["HFEngine"]) / statistics.median(times[c]["fast engine"])
            print(f"  fast engine vs HFEngine: x{ratio:.2f}")
    if fast is not None:  # same answers on this model: greedy tokens, and sampled log-probs against HFEngine's
        greedy = [GenRequest(r.prompt_ids, temperature=0.0, max_new_tokens=args.new, seed=r.seed) for r in reqs]
        same = sum(a.token_ids == b.token_ids for a, b in zip(fast.generate(greedy), hf.generate(greedy)))
        pairs = list(zip(fast.generate(reqs), hf.generate(reqs)))
        sampled = sum(a.token_ids == b.token_ids for a, b in pairs)
        lp = max(abs(x - y) for a, b in pairs if a.token_ids == b.token_ids for x, y in zip(a.logprobs, b.logprobs))
        print(f"parity: greedy tokens equal HFEngine's on {same}/{len(greedy)} prompts, T=1 samples (same seeds) on "
              f"{sampled}/{len(reqs)}; their log-probs differ by at most {lp:.1e}")


if __name__ == "__main__":
    main()
