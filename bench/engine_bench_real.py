"""Generation speed on a SmolLM2-135M-class model, GRPO-shaped work, against a matmul and a bandwidth roof.

The fast engine vs HFEngine vs `model.generate` vs transformers' continuous batching (`model.generate_batch`),
both roofs measured in the same run; engine_bench.py's arms, timing loop and FLOP counts, shared.

The full measurement (an idle machine, one pinned core; about 20 minutes):

    OMP_NUM_THREADS=1 taskset -c 0 .venv/bin/python bench/engine_bench_real.py --smollm2-shape \\
        --rows 8,32,64 --copies 4 --prompt-tokens 120 --new 32 --repeats 3

and the same with `--model-dir DIR` in place of `--smollm2-shape` for real SmolLM2-135M-Instruct weights
(`envace model import-smollm2 --out DIR`). At toy size: `--smollm2-shape --tokenizer tiny --layers 2
--rows 2,4 --copies 2 --new 2 --prompt-tokens 16 --repeats 1`.

Model: `--smollm2-shape` builds a random-init LlamaForCausalLM of SmolLM2-135M's architecture (hidden 576,
30 layers, 9 heads, 3 KV heads, head dim 64, MLP 1536, vocabulary 49152, tied embeddings, RoPE base 1e5,
8192 positions; `--layers` cuts the depth for smoke runs) and saves it in a temp dir; the speed does not depend
on the weight values. Its tokenizer (`--tokenizer smollm2`) is SmolLM2's own, read from the GGUF that
`envace.models.smollm2` imports (eos `<|im_end|>`, pad `<|endoftext|>`, as there); `--tokenizer tiny` takes the
project's tiny tokenizer (997 ids; the model keeps its 49152-row vocabulary, so the work is the same, and ids
past the tokenizer decode to nothing: the bench never reads the text).

Work: for each R in `--rows`, R / K distinct prompts (K = `--copies`) of ~`--prompt-tokens` tokens cut from the
tool-world text, each repeated K times in a row (a GRPO group: K completions of one prompt), every row its own
seed; T = 1, top_p = 1, one torch thread, every arm forced to produce exactly `--new` tokens per row. Arms run
interleaved (rotating order) `--repeats` times after an untimed warm-up; medians are compared in the same run.

Arms: `fast engine` (prefills a repeated prompt once and decodes its K rows from one trunk cache), `fast, row
copies` (the same engine with `share_prompts=False`: each row decodes from its own copy of the prompt's K/V,
the layout before trunk sharing), `HFEngine`, `model.generate` (the baseline) and
`generate_batch` (transformers' continuous batching; paged cache sized for the work: block 256, num_blocks =
rows x ceil((longest prompt + new) / 256) + 1, max_batch_tokens = all prompt tokens + rows, so prefill is one batch;
block sharing on, as by default; eos id -1 so no row stops early; the manager, its cache and its warm-up kept
across calls, the warm-up in the untimed call; every call still starts and stops the manager's thread, and
the stop runs a `gc.collect()` and a thread join, ~0.3 s per call here: part of any generate_batch call, so
part of its time). An arm that cannot do exactly this work here is listed as
"n/a: <class>: <reason>" (classes: error, missing rows, wrong length), never as a time.

Roofs, measured every repeat, median used:
- matmul: best float32 N x N x N sgemm GFLOP/s (engine_bench.matmul_roof); "% matmul roof" = (needed work /
  roof) / time, in brackets by the full-forward count (engine_bench.model_flops / forward_flops), both counting
  each distinct prompt's prefill once and every row's decode (`shared_flops`): an arm that prefills every copy
  does more than the needed work and scores lower.
- bandwidth B: a STREAM-like read, the best of 5 `sum()` passes over a float32 tensor of max(256 MiB, 4 x the
  last-level cache), in GB/s. Bytes a generation must at least read from memory:

      bytes = 4 P x new  +  sum over rows r of  sum_{j=1}^{new-1} (n_r + j) x L x 2 x kvh x hd x 4

  P: parameters (a tied embedding once), read once per forward pass: the prefill and new - 1 decode steps;
  then each decode step j reads row r's K and V for its n_r + j keys in L layers (kvh KV heads of hd dims,
  float32). "% bandwidth roof" = bytes / time / B. Departure: the K/V term counts every row's own cache, as a
  decoder without prefix sharing reads it; the fast engine reads a shared prompt's K/V once per step, so
  for it the term over-counts (by up to the K/V share: 6.2 of 23.5 GB at 32 rows of ~120-token prompts on
  SmolLM2). It ignores
  activations and the prefill's compute, so it is a floor on time only where decode dominates.

Times: wall clock is the claim; the `cpu ms` column (process CPU time, all threads) is steadier on a shared
machine. Parity, on a small case (the first min(4, R/K) distinct prompts, min(new, 8) tokens): greedy tokens of
every arm against the fast engine's, the greedy tokens' log-probs of HFEngine and generate_batch against the
fast engine's (flagged OVER past 1e-5; float32 rounding on the real SmolLM2 weights reaches ~2e-5, see
docs/performance.md), and engine_bench's same-seed T = 1 line.
"""

from __future__ import annotations

import argparse
import logging
import math
import statistics
import tempfile
from pathlib import Path

import engine_bench as eb  # bench/ is on the path: run as a script, or added by tests/bench
import torch
from engine_bench import ArmUnavailable

SMOLLM2_135M = dict(hidden_size=576, num_hidden_layers=30, num_attention_heads=9, num_key_value_heads=3,
                    head_dim=64, intermediate_size=1536, vocab_size=49152, tie_word_embeddings=True,
                    rope_theta=100000.0, max_position_embeddings=8192, rms_norm_eps=1e-5, hidden_act="silu")
BLOCK = 256  # generate_batch's KV block size (its default)
PARITY_PROMPTS, PARITY_NEW, LOGPROB_TOL = 4, 8, 1e-5


def shared_flops(count, cfg, distinct_lens: list[int], copies: int, new: int) -> float:
    """FLOPs of `count` (engine_bench.model_flops or forward_flops) when each distinct prompt is prefilled once
    (count at new = 1: the prompt and its first token's logits) and every one of its `copies` rows decodes the
    other new - 1 tokens."""
    prefill = count(cfg, distinct_lens, 1)
    return prefill + copies * (count(cfg, distinct_lens, new) - prefill)


def decode_bytes(params: int, cfg, prompt_lens: list[int], new: int) -> tuple[float, float]:
    """(weight bytes, K/V bytes) a generation must read at least: 4 x params per forward pass (the prefill and
    new - 1 decode steps), and at decode step j each row's K/V for its n + j keys, every layer, float32."""
    per_key = cfg.num_hidden_layers * 2 * cfg.num_key_value_heads * cfg.head_dim * 4
    kv = sum(per_key * sum(n + j for j in range(1, new)) for n in prompt_lens)
    return 4.0 * params * new, float(kv)


def bandwidth_share(n_bytes: float, seconds: float, roof_gbs: float) -> float:
    """Percent of the bandwidth roof: n_bytes read in `seconds` against `roof_gbs` GB/s."""
    return n_bytes / seconds / (roof_gbs * 1e9) * 100


def llc_bytes() -> int:
    """The largest CPU cache of cpu0 in bytes (0 where sysfs does not say)."""
    best = 0
    for index in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
        try:
            size = (index / "size").read_text().strip()
        except OSError:
            continue
        scale = {"K": 1024, "M": 1024 ** 2, "G": 1024 ** 3}.get(size[-1:], 1)
        best = max(best, int(size.rstrip("KMG")) * scale)
    return best


def bandwidth_roof(buf: torch.Tensor, reps: int = 5, clock=None) -> float:
    """Best GB/s of `reps` full reads (a sum) of the float32 tensor `buf`, timed with `clock`."""
    import time

    clock = clock or time.perf_counter
    buf.sum()
    best = float("inf")
    for _ in range(reps):
        t = clock()
        buf.sum()
        best = min(best, clock() - t)
    return buf.numel() * buf.element_size() / best / 1e9


def smollm2_tokenizer(kind: str, tmp: Path, corpus: list[str]):
    if kind == "tiny":
        from transformers import AutoTokenizer

        from envace.models.tiny import TinyModelConfig, init_tiny_model

        return AutoTokenizer.from_pretrained(init_tiny_model(corpus, tmp / "tiny", TinyModelConfig()))
    from transformers import AutoTokenizer

    from envace.models.smollm2 import SmolLM2Missing, find_gguf

    try:
        gguf = find_gguf()
    except SmolLM2Missing as exc:
        raise SystemExit(f"--tokenizer smollm2: {exc}; or pass --tokenizer tiny") from None
    tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name, local_files_only=True)
    tok.clean_up_tokenization_spaces = False
    tok.eos_token, tok.pad_token = "<|im_end|>", "<|endoftext|>"  # as envace.models.smollm2 sets them
    return tok


def build_smollm2_shape(tmp: Path, layers: int, tokenizer: str):
    """A random-init LlamaForCausalLM of SmolLM2-135M's shape (`layers` deep), saved in `tmp` and loaded back
    as any model dir is; with the tokenizer and the tool-world corpus."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from envace.models.corpus import world_corpus
    from envace.models.loading import load_policy, save_model

    corpus = list(world_corpus(300, seed=0))
    tok = smollm2_tokenizer(tokenizer, tmp, corpus)
    cfg = LlamaConfig(**{**SMOLLM2_135M, "num_hidden_layers": layers}, pad_token_id=tok.pad_token_id,
                      eos_token_id=tok.eos_token_id, bos_token_id=None)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = LlamaForCausalLM(cfg).float().eval()
    path = save_model(model, tok, tmp / "smollm2-shape")
    del model
    model, tok = load_policy(path, device="cpu", dtype="float32")
    return model, tok, corpus


class BatchArm:
    """`model.generate_batch` as a timed arm: exactly `new` tokens per row, or ArmUnavailable saying why."""

    def __init__(self, model, prompts: list[list[int]], new: int, greedy: bool = False, logprobs: bool = False):
        """`model` as transformers ships it (`eb.as_shipped`): continuous batching pages only transformers' own
        attention implementations."""
        from transformers import ContinuousBatchingConfig, GenerationConfig

        self.model, self.prompts, self.new = model, prompts, new
        blocks = len(prompts) * math.ceil((max(map(len, prompts)) + new) / BLOCK) + 1
        self.cb = ContinuousBatchingConfig(block_size=BLOCK, num_blocks=blocks, seed=0, return_logprobs=logprobs,
                                           max_batch_tokens=sum(map(len, prompts)) + len(prompts))
        sampling = dict(do_sample=False) if greedy else dict(do_sample=True, temperature=1.0, top_p=1.0, top_k=0)
        self.gen = GenerationConfig(**sampling, max_new_tokens=new, eos_token_id=-1)
        self.persistent = not greedy  # timed: keep the manager (cache, warm-up) across calls

    def results(self):
        try:
            out = self.model.generate_batch(self.prompts, generation_config=self.gen, progress_bar=False,
                                            continuous_batching_config=self.cb, persistent_manager=self.persistent,
                                            warmup=self.persistent)
        except Exception as exc:  # any failure is the arm's reported reason, not a crash of the whole table
            first = (str(exc).splitlines() or [""])[0][:120]
            raise ArmUnavailable(f"n/a: error: {type(exc).__name__}: {first}") from exc
        rows = list(out.values())
        if len(rows) != len(self.prompts):
            raise ArmUnavailable(f"n/a: missing rows: returned {len(rows)} of {len(self.prompts)} requests")
        bad = [r for r in rows if r.error or len(r.generated_tokens) != self.new]
        if bad:
            lens = sorted({len(r.generated_tokens) for r in bad})
            raise ArmUnavailable(f"n/a: wrong length: {len(bad)} rows gave {lens} new tokens, not {self.new}"
                                 + (f" ({bad[0].error})" if bad[0].error else ""))
        return rows

    def __call__(self) -> int:
        return sum(len(r.generated_tokens) for r in self.results())

    def close(self) -> None:
        self.model.destroy_cached_continuous_batching_manager()


def greedy_parity(shipped, tok, fast, hf, prompts: list[list[int]], new: int) -> str:
    """Greedy tokens of every arm against the fast engine's; greedy log-probs against the fast engine's.
    `shipped`: the baselines' model (`eb.as_shipped`)."""
    from envace.engines.base import GenRequest

    reqs = [GenRequest(p, temperature=0.0, max_new_tokens=new, seed=i) for i, p in enumerate(prompts)]
    ref, hf_out = fast.generate(reqs), hf.generate(reqs)
    tokens = {"HFEngine": [r.token_ids for r in hf_out]}
    ids, mask = eb.padded_batch(tok, prompts)
    with torch.inference_mode():
        out = shipped.generate(input_ids=ids, attention_mask=mask, do_sample=False, max_new_tokens=new,
                               min_new_tokens=new, eos_token_id=None, pad_token_id=tok.pad_token_id)
    tokens["model.generate"] = out[:, ids.shape[1]:].tolist()
    gaps = {"HFEngine": max((abs(x - y) for a, b in zip(ref, hf_out) if a.token_ids == b.token_ids
                             for x, y in zip(a.logprobs, b.logprobs)), default=float("nan"))}
    batch = BatchArm(shipped, prompts, new, greedy=True, logprobs=True)
    try:
        rows = batch.results()
        tokens["generate_batch"] = [r.generated_tokens for r in rows]
        pairs = [(a, b) for a, b in zip(ref, rows) if a.token_ids == b.generated_tokens and b.logprobs]
        gaps["generate_batch"] = max((abs(x - y) for a, b in pairs for x, y in zip(a.logprobs, b.logprobs)),
                                     default=float("nan"))
    except ArmUnavailable as exc:
        tokens["generate_batch"] = str(exc)
    same = ", ".join(f"{k} {v}" if isinstance(v, str) else
                     f"{k} {sum(a.token_ids == b for a, b in zip(ref, v))}/{len(ref)}" for k, v in tokens.items())
    lp = ", ".join(f"{k} {v:.1e} ({'within' if v <= LOGPROB_TOL else 'OVER'} {LOGPROB_TOL:.0e})"
                   for k, v in gaps.items())
    return (f"parity ({len(prompts)} prompts x {new} tokens): greedy tokens equal the fast engine's: {same}; "
            f"greedy log-probs vs the fast engine's: {lp}")


def grouped_prompts(tok, corpus: list[str], rows: int, copies: int, target: int) -> list[list[int]]:
    """rows / copies distinct prompts, each repeated `copies` times in a row."""
    return [p for p in eb.make_prompts(tok, corpus, rows // copies, target) for _ in range(copies)]


HEADER = ("| rows | prompts x K | arm | median ms | new tok/s | x vs model.generate | % matmul roof (full) "
          "| % bandwidth roof | cpu ms |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", default="8,32,64", help="comma-separated batch sizes, each a multiple of --copies")
    ap.add_argument("--copies", type=int, default=4, help="rows per distinct prompt (GRPO's K completions)")
    ap.add_argument("--new", type=int, default=32, help="new tokens per row, exactly")
    ap.add_argument("--prompt-tokens", type=int, default=120, help="prompt length, +-10 %%")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    model_src = ap.add_mutually_exclusive_group(required=True)
    model_src.add_argument("--smollm2-shape", action="store_true", help="random-init SmolLM2-135M architecture")
    model_src.add_argument("--model-dir", help="a local HF model dir (e.g. `envace model import-smollm2`)")
    ap.add_argument("--layers", type=int, default=30, help="depth of the --smollm2-shape model (smoke runs: 2)")
    ap.add_argument("--tokenizer", default="smollm2", choices=["smollm2", "tiny"],
                    help="tokenizer of the --smollm2-shape model")
    ap.add_argument("--arms", nargs="+", default=["fast", "copies", "hf", "cb"],
                    choices=["fast", "copies", "hf", "cb"],
                    help="arms timed beside model.generate (cb: generate_batch; copies: the fast engine with "
                         "share_prompts off, each row its own copy of its prompt's K/V)")
    args = ap.parse_args()
    try:
        grid = [int(r) for r in args.rows.split(",")]
    except ValueError:
        raise SystemExit(f"--rows {args.rows!r}: give comma-separated integers, e.g. 8,32,64") from None
    if args.copies < 1 or args.new < 1 or args.layers < 1 or min(grid) < 1:
        raise SystemExit("--rows, --copies, --new and --layers must be positive")
    for rows in grid:
        if rows % args.copies:
            raise SystemExit(f"--rows {rows} is not divisible by --copies {args.copies}: each prompt has exactly K "
                             f"rows; pick rows that are multiples of {args.copies}")
    torch.set_num_threads(args.threads)
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    logging.getLogger("ContinuousBatchingLogger").setLevel(logging.ERROR)  # generate_batch's warm-up notices

    with tempfile.TemporaryDirectory() as tmp:
        if args.smollm2_shape:
            model, tok, corpus = build_smollm2_shape(Path(tmp), args.layers, args.tokenizer)
        else:
            model, tok, corpus = eb.build_model(Path(tmp), args.model_dir)
    cfg, params = model.config, eb.n_params(model)
    buf = torch.ones(max(256 * 2 ** 20, 4 * llc_bytes()) // 4)
    probes = {"matmul": lambda clock: eb.matmul_roof(clock=clock),
              "bandwidth": lambda clock: bandwidth_roof(buf, clock=clock)}
    print(f"model: {args.model_dir or f'SmolLM2-135M shape, random init, {args.layers} layers'} ({cfg.model_type}, "
          f"{params:,} parameters, vocabulary {cfg.vocab_size}, tokenizer {len(tok)} ids); {args.threads} thread(s), "
          f"{args.repeats} interleaved repeats; bandwidth probe {buf.numel() * 4 / 2 ** 20:.0f} MiB "
          f"(last-level cache {llc_bytes() / 2 ** 20:.1f} MiB)")
    lines, notes = [HEADER, "|" + "---|" * (HEADER.count("|") - 1)], []
    shipped = eb.as_shipped(model)  # the baselines' model, one copy for the whole run
    for rows in grid:
        prompts = grouped_prompts(tok, corpus, rows, args.copies, args.prompt_tokens)
        arms, fast, hf = eb.make_arms(model, tok, prompts, args.new, args.arms, args.threads, shipped)
        batch = BatchArm(shipped, prompts, args.new) if "cb" in args.arms else None
        if batch is not None:
            arms = {**{k: v for k, v in arms.items() if k != "model.generate"}, "generate_batch": batch,
                    "model.generate": arms["model.generate"]}
        times, probed, n_new, unavailable = eb.time_interleaved(arms, args.repeats, probes)
        if batch is not None:
            batch.close()
        lens, distinct = [len(p) for p in prompts], [len(p) for p in prompts[::args.copies]]
        flops, full = (shared_flops(count, cfg, distinct, args.copies, args.new)
                       for count in (eb.model_flops, eb.forward_flops))
        weights, kv = decode_bytes(params, cfg, lens, args.new)
        mm, bw = (statistics.median(probed["wall"][k]) for k in ("matmul", "bandwidth"))
        notes.append(f"rows {rows}: roofs matmul {mm:.2f} GFLOP/s, bandwidth {bw:.3f} GB/s; work {flops / 1e9:.4f} "
                     f"GFLOP needed ({full / 1e9:.4f} full forward), reads {(weights + kv) / 1e6:.3f} MB "
                     f"(weights {weights / 1e6:.3f} MB + K/V {kv / 1e6:.3f} MB); prompts {min(lens)}-{max(lens)} "
                     f"tokens; all wall times (ms): " + "; ".join(
                         f"{k} {', '.join(f'{t * 1e3:.1f}' for t in v)}" for k, v in times["wall"].items()))
        base = statistics.median(times["wall"]["model.generate"])
        for name in arms:
            if name in unavailable:
                lines.append(f"| {rows} | {rows // args.copies} x {args.copies} | {name} | {unavailable[name]} "
                             f"| - | - | - | - | - |")
                continue
            med, cpu = statistics.median(times["wall"][name]), statistics.median(times["cpu"][name])
            lines.append(f"| {rows} | {rows // args.copies} x {args.copies} | {name} | {med * 1e3:.2f} "
                         f"| {n_new / med:.0f} | {base / med:.2f} | {flops / mm / 1e9 / med * 100:.2f} "
                         f"({full / mm / 1e9 / med * 100:.2f}) | {bandwidth_share(weights + kv, med, bw):.2f} "
                         f"| {cpu * 1e3:.2f} |")
    print("\n".join(lines))
    print("\n".join(notes))
    if fast is not None:
        distinct = prompts[::args.copies][:PARITY_PROMPTS]
        new = min(args.new, PARITY_NEW)
        print(greedy_parity(shipped, tok, fast, hf, distinct, new))
        print(eb.parity_line(fast, hf, distinct, new))


if __name__ == "__main__":
    main()
