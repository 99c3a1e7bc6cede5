"""Attention of a branch pass (branches continuing one shared trunk), forward + backward, in three layouts.

    OMP_NUM_THREADS=1 taskset -c 0 .venv/bin/python bench/branch_attention_bench.py
    OMP_NUM_THREADS=1 .venv/bin/python bench/branch_attention_bench.py --rows 64 --branch 63 --trunk 176  # RL update

The training forward (transformers' `sdpa` attention over envace.engines.logprobs.prefix_logprobs's passes)
runs each branch pass as queries (rows, heads, branch) against keys (rows, kv heads, trunk + branch) with a
boolean mask: every trunk column visible, causal inside the branch. Arms, each timed as one
`scaled_dot_product_attention` call and its backward on the same random float32 tensors:

- `masked` (the baseline, what the training path runs): K/V repeated to the query heads (transformers'
  `repeat_kv`), the mask passed;
- `masked, native GQA`: the same mask, K/V left at their own heads (`enable_gqa=True`);
- `causal, query padded`: the queries preceded by trunk-length zero rows so that a plain `is_causal=True`
  (top-left aligned, the one CPU flash attention skips blocks for) is the branch's mask; the padded
  outputs are dropped. Valid only for passes whose trunk has no padding (one trunk per pass).

Defaults are the demo's SFT branch pass (11 rows, 4 query / 2 kv heads of 32, a 231-token branch after an
83-token trunk). Arms rotate `--repeats` times; the script prints each arm's median ms per call (forward +
backward), its ratio to `masked`, and its largest output difference from `masked`.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=11)
    ap.add_argument("--branch", type=int, default=231, help="query positions per row")
    ap.add_argument("--trunk", type=int, default=83, help="shared trunk positions before the branch")
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--head-dim", type=int, default=32)
    ap.add_argument("--iters", type=int, default=10, help="calls per timing")
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    b, h, kvh, q, t, d = args.rows, args.heads, args.kv_heads, args.branch, args.trunk, args.head_dim
    s, rep = t + q, args.heads // args.kv_heads
    gen = torch.Generator().manual_seed(0)
    query = torch.randn(b, h, q, d, generator=gen, requires_grad=True)
    key = torch.randn(b, kvh, s, d, generator=gen, requires_grad=True)
    value = torch.randn(b, kvh, s, d, generator=gen, requires_grad=True)
    grad = torch.randn(b, h, q, d, generator=gen)
    mask = torch.ones(q, s, dtype=torch.bool).tril(t)[None, None].expand(b, 1, q, s)

    def heads(x: torch.Tensor) -> torch.Tensor:  # (b, kvh, s, d) -> (b, h, s, d), as repeat_kv does
        return x[:, :, None].expand(b, kvh, rep, s, d).reshape(b, h, s, d)

    arms = {
        "masked": lambda: F.scaled_dot_product_attention(query, heads(key), heads(value), attn_mask=mask),
        "masked, native GQA": lambda: F.scaled_dot_product_attention(query, key, value, attn_mask=mask,
                                                                     enable_gqa=True),
        "causal, query padded": lambda: F.scaled_dot_product_attention(
            torch.cat([query.new_zeros(b, h, t, d), query], 2), heads(key), heads(value), is_causal=True)[:, :, t:],
    }
    with torch.no_grad():
        ref = arms["masked"]()
        diff = {name: float((fn() - ref).abs().max()) for name, fn in arms.items()}
    names = list(arms)
    times: dict[str, list[float]] = {n: [] for n in names}
    for fn in arms.values():  # warm-up
        fn().backward(grad)
    for r in range(args.repeats):
        for name in names[r % len(names):] + names[:r % len(names)]:
            start = time.perf_counter()
            for _ in range(args.iters):
                arms[name]().backward(grad)
            times[name].append((time.perf_counter() - start) / args.iters * 1e3)
    base = statistics.median(times["masked"])
    print(f"branch pass: {b} rows x {h} heads ({kvh} kv) x {q} queries against {t} trunk + {q} branch keys, "
          f"head dim {d}, {torch.get_num_threads()} thread(s), {args.repeats} repeats of {args.iters} calls")
    for name in names:
        med = statistics.median(times[name])
        spread = ", ".join(f"{x:.1f}" for x in times[name])
        print(f"  {name:22s} {med:7.2f} ms  x{med / base:.2f} of masked  max |out - masked| {diff[name]:.1e}  "
              f"(all: {spread})")


if __name__ == "__main__":
    main()
