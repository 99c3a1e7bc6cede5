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
run interleaved (rotating order) `--repeats` times; the medians are compared in the same run. The baseline
runs transformers as shipped (`sdpa` attention), not the CPU attention envace's loader switches to.

Times are reported twice: wall clock (the claim) and process CPU time (steadier when other processes
share the cores; the roof is then measured with the same clock). Roof: the best single-thread float32
matmul rate measured in this run (N x N x N sgemm). Work: the FLOPs the generation needs (`model_flops`;
the last layer's attention output, MLP and the output layer only where logits are read; transformers'
forward, in HFEngine and model.generate, does more than this). "% of roof" = (work / roof) / time; in
brackets the same with the full-forward count (`forward_flops`, the count docs/performance.md's ~40 % uses).
"""

from __future__ import annotations

import argparse
import copy
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


def padded_batch(tok, prompts: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-padded ids and attention mask for `model.generate`."""
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), tok.pad_token_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, p in enumerate(prompts):
        ids[i, width - len(p):], mask[i, width - len(p):] = torch.tensor(p), 1
    return ids, mask


def as_shipped(model):
    """The model as transformers runs it for a user: a copy on transformers' `sdpa` where envace's loader
    switched it to `envace_sdpa` (envace.models.attention), else the model itself. Baseline arms
    (`model.generate`, `generate_batch`) run on it; envace's engines run on the loaded model."""
    from envace.models.attention import NAME

    if getattr(model.config, "_attn_implementation", None) != NAME:
        return model
    shipped = copy.deepcopy(model)
    shipped.set_attn_implementation("sdpa")
    return shipped


def make_arms(model, tok, prompts: list[list[int]], new: int, arms: list[str], threads: int, shipped=None):
    """The timed arms, in table order: name -> a callable returning the number of new tokens it produced
    (every arm produces exactly `new` per prompt), and the fast and HF engines (None where left out).
    `shipped`: the baseline's model (`as_shipped(model)`, made here when not given)."""
    from envace.engines.base import GenRequest
    from envace.engines.fast import FastEngine
    from envace.engines.hf import HFEngine

    reqs = [GenRequest(p, temperature=1.0, max_new_tokens=new, seed=i) for i, p in enumerate(prompts)]
    fast = FastEngine(model, tok, device="cpu") if "fast" in arms else None  # thread shards at > 1 thread
    # the layout before trunk sharing: every row decodes from its own copy of its prompt's K/V
    copies = FastEngine(model, tok, device="cpu", share_prompts=False) if "copies" in arms else None
    one_pass = FastEngine(model, tok, device="cpu", shards=1) if "fast" in arms and threads > 1 else None
    hf = HFEngine(model, tok, device="cpu")
    for engine in (fast, copies, one_pass, hf):  # same work in every arm: exactly `new` tokens per row
        if engine is not None:
            engine.stop_ids = set()
    ids, mask = padded_batch(tok, prompts)
    shipped = as_shipped(model) if shipped is None else shipped

    def engine_arm(engine):
        return lambda: sum(len(r.token_ids) for r in engine.generate(reqs))

    @torch.inference_mode()
    def run_generate() -> int:
        out = shipped.generate(input_ids=ids, attention_mask=mask, do_sample=True, temperature=1.0, top_p=1.0,
                             top_k=0, max_new_tokens=new, min_new_tokens=new, eos_token_id=None,
                             pad_token_id=tok.pad_token_id)
        return (out.shape[1] - ids.shape[1]) * out.shape[0]

    out = {"fast engine": engine_arm(fast) if fast is not None else None,
           "fast, row copies": engine_arm(copies) if copies is not None else None,
           "fast, 1 shard": engine_arm(one_pass) if one_pass is not None else None,
           "HFEngine": engine_arm(hf) if "hf" in arms else None, "model.generate": run_generate}
    return {k: v for k, v in out.items() if v is not None}, fast, hf


class ArmUnavailable(RuntimeError):
    """An arm that cannot do the benchmark's work here; the message is the table's classified reason."""


CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}


def time_interleaved(arms: dict, repeats: int, probes: dict):
    """Warm every arm up (untimed), then time them interleaved, the order rotating each repeat, on both
    clocks. `probes`: name -> f(clock) -> a roof, measured once per repeat and clock. An arm whose warm-up
    raises ArmUnavailable is left out with its reason. Returns (times[clock][arm] in s, probed[clock][probe],
    new tokens of the last call, {left-out arm: reason})."""
    unavailable: dict[str, str] = {}
    for name, fn in list(arms.items()):
        try:
            fn()
        except ArmUnavailable as exc:
            unavailable[name] = str(exc)
    names = [k for k in arms if k not in unavailable]
    times = {c: {k: [] for k in names} for c in CLOCKS}
    probed = {c: {k: [] for k in probes} for c in CLOCKS}
    n_new = 0
    for rep in range(repeats):
        for c, clock in CLOCKS.items():
            for k, probe in probes.items():
                probed[c][k].append(probe(clock))
        for name in names[rep % len(names):] + names[:rep % len(names)]:
            t0, c0 = time.perf_counter(), time.process_time()
            n_new = arms[name]()
            times["wall"][name].append(time.perf_counter() - t0)
            times["cpu"][name].append(time.process_time() - c0)
    return times, probed, n_new, unavailable


def n_params(model) -> int:
    """Parameters, a tied embedding counted once."""
    return sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())


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

    with tempfile.TemporaryDirectory() as tmp:
        model, tok, corpus = build_model(Path(tmp), args.model_dir)
    prompts = make_prompts(tok, corpus, args.rows, args.prompt_tokens)
    arms, fast, hf = make_arms(model, tok, prompts, args.new, args.arms, args.threads)
    times, probed, n_new, _ = time_interleaved(arms, args.repeats, {"matmul": lambda clock: matmul_roof(clock=clock)})
    flops = model_flops(model.config, [len(p) for p in prompts], args.new)
    full = forward_flops(model.config, [len(p) for p in prompts], args.new)
    print(f"model: {args.model_dir or 'the tiny model'} ({model.config.model_type}, "
          f"{n_params(model) / 1e6:.1f} M parameters), "
          f"fast engine arithmetic {type(fast.kernel).__name__ if fast else '-'}")
    print(f"work: {len(prompts)} prompts of {min(map(len, prompts))}-{max(map(len, prompts))} tokens, {args.new} new "
          f"tokens each ({n_new} new tokens), {args.threads} thread(s), {args.repeats} interleaved repeats, "
          f"needed work {flops / 1e9:.2f} GFLOP (full forward count: {full / 1e9:.2f} GFLOP)")
    for c in CLOCKS:  # wall time is the claim; CPU time is the steadier measure on a shared machine
        roof = statistics.median(probed[c]["matmul"])
        print(f"[{c} time] roof {roof:.1f} GFLOP/s float32 matmul (median of per-repeat bests) "
              f"-> {flops / roof / 1e9 * 1e3:.0f} ms at roof")
        base = statistics.median(times[c]["model.generate"])
        for name in arms:
            med = statistics.median(times[c][name])
            print(f"  {name:15s} median {med * 1e3:7.1f} ms  {n_new / med:8.0f} new tok/s  "
                  f"{flops / roof / 1e9 / med * 100:5.1f} % of roof ({full / roof / 1e9 / med * 100:4.1f} % by "
                  f"full forward)  x{base / med:.2f} vs model.generate  "
                  f"(all: {', '.join(f'{t * 1e3:.0f}' for t in times[c][name])} ms)")
        if "HFEngine" in arms and "fast engine" in arms:
            ratio = statistics.median(times[c]["HFEngine"]) / statistics.median(times[c]["fast engine"])
            print(f"  fast engine vs HFEngine: x{ratio:.2f}")
    if fast is not None:
        print(parity_line(fast, hf, prompts, args.new))


def parity_line(fast, hf, prompts: list[list[int]], new: int) -> str:
    """Same answers on this model: greedy tokens, and T=1 samples (same seeds) with their log-probs, fast
    engine against HFEngine."""
    from envace.engines.base import GenRequest

    greedy = [GenRequest(p, temperature=0.0, max_new_tokens=new, seed=i) for i, p in enumerate(prompts)]
    reqs = [GenRequest(p, temperature=1.0, max_new_tokens=new, seed=i) for i, p in enumerate(prompts)]
    same = sum(a.token_ids == b.token_ids for a, b in zip(fast.generate(greedy), hf.generate(greedy)))
    pairs = list(zip(fast.generate(reqs), hf.generate(reqs)))
    sampled = sum(a.token_ids == b.token_ids for a, b in pairs)
    lp = max((abs(x - y) for a, b in pairs if a.token_ids == b.token_ids for x, y in zip(a.logprobs, b.logprobs)),
             default=float("nan"))
    return (f"parity: greedy tokens equal HFEngine's on {same}/{len(greedy)} prompts, T=1 samples (same seeds) on "
            f"{sampled}/{len(reqs)}; their log-probs differ by at most {lp:.1e}")


if __name__ == "__main__":
    main()
