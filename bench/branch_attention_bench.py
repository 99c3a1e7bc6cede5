"""Attention of a branch pass (branches continuing shared trunks), forward + backward, in five layouts.

    OMP_NUM_THREADS=1 taskset -c 0 .venv/bin/python bench/branch_attention_bench.py
    # the RL bench's update (bench/rl_step_bench.py), and a tool-call RL shape (long prompts, short calls)
    OMP_NUM_THREADS=1 .venv/bin/python bench/branch_attention_bench.py --rows 64 --branch 63 --trunk 176 --per-trunk 8
    OMP_NUM_THREADS=1 .venv/bin/python bench/branch_attention_bench.py --rows 64 --branch 64 --trunk 600 --per-trunk 8

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

Two more arms start from the trunks' own K/V, (rows / `--per-trunk` trunks, kv heads, trunk, head dim), and
the branch rows' K/V, as a branch pass gets them, so their time includes making each row's keys:

- `per-row copies`: each row's copy of its trunk's K/V joined to its own (index_select and cat; their
  backward scatter-adds the copies' gradients), then `masked, native GQA`: the branch pass where it does not
  split;
- `split at the trunk`: envace.models.trunk_attention (each trunk's K/V read once for its rows, the rows' own
  keys causal, merged by log-sum-exp), printed with its ratio to `per-row copies`.

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

from envace.models.trunk_attention import BranchTrunks, split_attention


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=11)
    ap.add_argument("--branch", type=int, default=231, help="query positions per row")
    ap.add_argument("--trunk", type=int, default=83, help="shared trunk positions before the branch")
    ap.add_argument("--per-trunk", type=int, default=0, help="branch rows per trunk (default: all rows on one)")
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
    per = args.per_trunk or b
    rows_trunk = torch.arange(b) // per
    trunk_key = torch.randn(int(rows_trunk[-1]) + 1, kvh, t, d, generator=gen, requires_grad=True)
    trunk_value = torch.randn(trunk_key.shape, generator=gen, requires_grad=True)
    own_key, own_value = key[:, :, t:].detach().requires_grad_(), value[:, :, t:].detach().requires_grad_()
    trunks = BranchTrunks([(trunk_key, trunk_value)], torch.ones(trunk_key.shape[0], t, dtype=torch.bool), rows_trunk)

    def copies() -> torch.Tensor:
        k = torch.cat([trunk_key.index_select(0, rows_trunk), own_key], 2)
        v = torch.cat([trunk_value.index_select(0, rows_trunk), own_value], 2)
        return F.scaled_dot_product_attention(query, k, v, attn_mask=mask, enable_gqa=True)

    def heads(x: torch.Tensor) -> torch.Tensor:  # (b, kvh, s, d) -> (b, h, s, d), as repeat_kv does
        return x[:, :, None].expand(b, kvh, rep, s, d).reshape(b, h, s, d)

    arms = {
        "masked": lambda: F.scaled_dot_product_attention(query, heads(key), heads(value), attn_mask=mask),
        "masked, native GQA": lambda: F.scaled_dot_product_attention(query, key, value, attn_mask=mask,
                                                                     enable_gqa=True),
        "causal, query padded": lambda: F.scaled_dot_product_attention(
            torch.cat([query.new_zeros(b, h, t, d), query], 2), heads(key), heads(value), is_causal=True)[:, :, t:],
        "per-row copies": copies,
        "split at the trunk": lambda: split_attention(query, own_key, own_value, trunks, 0, d ** -0.5),
    }
    with torch.no_grad():  # the arms from trunk K/V see other keys: compared with each other
        ref = arms["masked"]()
        diff = {name: float((fn() - ref).abs().max()) for name, fn in arms.items()}
        diff["split at the trunk"] = float((arms["split at the trunk"]() - copies()).abs().max())
        diff["per-row copies"] = float("nan")
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
    print(f"branch pass: {b} rows x {h} heads ({kvh} kv) x {q} queries against {t} trunk + {q} branch keys, "
          f"{per} rows per trunk, head dim {d}, {torch.get_num_threads()} thread(s), {args.repeats} repeats of "
          f"{args.iters} calls")
    for name in names:
        med = statistics.median(times[name])
        spread = ", ".join(f"{x:.1f}" for x in times[name])
        against = "per-row copies" if name == "split at the trunk" else "masked"
        ratio = med / statistics.median(times[against])
        print(f"  {name:22s} {med:7.2f} ms  x{ratio:.2f} of {against}  max |out - {against}| {diff[name]:.1e}  "
              f"(all: {spread})")


if __name__ == "__main__":
    main()
