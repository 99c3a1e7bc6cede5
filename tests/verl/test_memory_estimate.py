"""The memory estimate of verl's log-prob and update paths (envace/trainers/verl/memory.py): hand-worked
byte counts, the worst micro-batch against a brute force over every grouping, the launch config's
reading (micro-batching, temperatures), the dry run's lines, and docs/gpu.md's table following it."""

from __future__ import annotations

import itertools
import random
from pathlib import Path

import pytest

from envace.config import load_config
from envace.trainers.verl.config import VerlLaunchConfig
from envace.trainers.verl.memory import (
    GB,
    ModelShape,
    estimate_paths,
    launch_estimates,
    launch_temperatures,
    memory_lines,
    needs_fp32_copy,
    worst_micro_batch,
)

ROOT = Path(__file__).resolve().parents[2]
V = 151_936  # Qwen3's vocabulary
MIX = [15000, 3000, 1000, 1000]


def test_hand_worked_old_log_prob_bytes():
    # one 20k row, mixed role temperatures: bf16 logits 2 + fp32 copy 4 + softmax 4 + one fp32 temporary 4
    one = worst_micro_batch([20000], packed=False, rows_per_micro_batch=1)
    old, ref, update = estimate_paths(one, fp32_copy=True)
    assert old.total == 14 * 20000 * V == 42_542_080_000  # "42 GB"
    assert ref.total == (2 + 4) * 20000 * V + 4 * V * 20000  # no entropy; the row loop's log-softmax
    assert update.total == (2 + 4 + 8) * 20000 * V + 2 * 4096 * 36 * 20000  # + checkpointed layer inputs
    # {15k, 3k, 1k, 1k} under a 20k real-token cap with sdpa: one micro-batch padded to 4 x 15k
    mb = worst_micro_batch(MIX, packed=False, token_cap=20000)
    assert (mb.rows, mb.longest, mb.real, mb.padded) == (4, 15000, 20000, 60000)
    old = estimate_paths(mb, fp32_copy=True)[0]
    assert old.terms["sdpa mask"] == 4 * 15000 ** 2
    assert old.total - old.terms["sdpa mask"] == 14 * 60000 * V == 127_626_240_000  # "~128 GB"
    # one row per micro-batch bounds the padding at the longest row
    assert worst_micro_batch(MIX, packed=False, rows_per_micro_batch=1).padded == 15000
    # all rows at temperature 1: no fp32 copy, the softmax work in bf16
    assert estimate_paths(one, fp32_copy=False)[0].total == (2 + 2 + 2) * 20000 * V


def test_packed_rows_count_real_tokens_and_chunk_the_entropy():
    mb = worst_micro_batch(MIX, packed=True, token_cap=20000)
    assert (mb.padded, mb.real) == (20000, 20000)
    old, ref, update = estimate_paths(mb, fp32_copy=True, flash_ce=True, entropy_chunk=2048)
    assert old.total == (2 + 4) * 20000 * V + 2 * 4 * 2048 * V
    assert ref.total == (2 + 4) * 20000 * V  # flash-attn's in-place cross-entropy
    assert update.terms["log-softmax gradients"] == 4 * 20000 * V


def _brute_force(lengths, packed, cap=None, rows=None):
    """Every grouping holding the longest row: the most padded tokens (fewest real ones on a tie)."""
    longest = max(lengths)
    others = list(lengths)
    others.remove(longest)
    best = None
    for k in range(len(others) + 1):
        for combo in itertools.combinations(others, k):
            real = longest + sum(combo)
            if (cap is not None and real > cap) or (rows is not None and 1 + k > rows):
                continue
            padded = real if packed else (1 + k) * longest
            key = (padded, -real if not packed else real)
            best = max(best, key) if best else key
    return best[0]


def test_worst_micro_batch_matches_a_brute_force():
    rng = random.Random(7)
    for _ in range(300):
        lengths = [rng.randint(1, 400) for _ in range(rng.randint(1, 8))]
        cap = rng.randint(max(lengths), 1200)
        rows = rng.randint(1, 5)
        for packed in (False, True):
            assert worst_micro_batch(lengths, packed=packed, token_cap=cap).padded == \
                _brute_force(lengths, packed, cap=cap), (lengths, cap, packed)
            assert worst_micro_batch(lengths, packed=packed, rows_per_micro_batch=rows).padded == \
                _brute_force(lengths, packed, rows=rows), (lengths, rows, packed)
    with pytest.raises(ValueError, match="does not fit the token cap"):
        worst_micro_batch([300], packed=False, token_cap=200)


def test_the_launch_config_reading():
    example = ROOT / "configs" / "verl" / "qwen3_8b_cm2.yaml"
    cfg = load_config(VerlLaunchConfig, example)
    assert launch_temperatures(cfg) == [1.0] and not needs_fp32_copy([1.0])
    paper = load_config(VerlLaunchConfig, example, ["loop.act.temperature=1.0", "loop.rehearse.temperature=0.01"])
    assert launch_temperatures(paper) == [0.01, 1.0] and needs_fp32_copy([0.01, 1.0])
    assert launch_temperatures(load_config(VerlLaunchConfig, example, ["loop.rehearse.temperature=0"])) == [1.0]
    old = launch_estimates(paper)[0]  # rows mode (sdpa), one row per micro-batch: the mix's 15k row
    assert old.micro_batch.padded == 15000 and old.total == 14 * 15000 * V
    assert launch_estimates(paper, [20000])[0].total == 14 * 20000 * V
    lines = memory_lines(paper)
    assert lines[0].startswith("# memory per GPU (estimate") and "with the fp32 temperature copy" in lines[0]
    assert "#   old log-probs: 1 row x 15000 = 15000 padded tokens (15000 real)" in lines[1]
    assert any(line.startswith("#   old log-probs: 1 row x 20000") and line.endswith("= 42.5 GB") for line in lines)
    flash = load_config(VerlLaunchConfig, example, ["attn_implementation=flash_attention_2", "micro_batching=auto",
                                                    "loop.rehearse.temperature=0.01"])
    assert flash.micro_batching_mode() == "tokens" and launch_estimates(flash)[0].micro_batch.padded == 20000
    wide = load_config(VerlLaunchConfig, example, ["log_prob_micro_batch_per_gpu=4"])
    est = launch_estimates(wide)
    assert (est[0].micro_batch.padded, est[2].micro_batch.padded) == (60000, 15000)  # 4 rows x 15k; update 1 row
    with pytest.raises(ValueError, match="memory.rows holds \\[30000\\]"):
        load_config(VerlLaunchConfig, example, ["memory.rows=[30000]"])


def _docs_rows() -> list[str]:
    cases = [("sdpa, 20,000-token cap (the old launch)", worst_micro_batch(MIX, packed=False, token_cap=20000), {}),
             ("sdpa, one row per micro-batch (now), a 20,000-token row",
              worst_micro_batch([20000], packed=False, rows_per_micro_batch=1), {}),
             ("flash-attention 2, 20,000-token cap, packed", worst_micro_batch(MIX, packed=True, token_cap=20000),
              {"flash_ce": True, "entropy_chunk": 2048})]
    rows = []
    for name, mb, kw in cases:
        for copy in (True, False):
            paths = estimate_paths(mb, ModelShape(), fp32_copy=copy, **kw)
            rows.append(f"| {name} | {'1.0 / 0.01' if copy else '1.0 / 1.0'} | {mb.padded:,} ({mb.real:,}) | "
                        + " | ".join(f"{p.total / GB:.1f}" for p in paths) + " |")
    return rows


def test_docs_table_follows_the_estimator():
    text = (ROOT / "docs" / "gpu.md").read_text()
    missing = [row for row in _docs_rows() if row not in text]
    assert not missing, "docs/gpu.md's memory table is stale; its rows should read:\n" + "\n".join(_docs_rows())
