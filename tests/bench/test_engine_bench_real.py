"""bench/engine_bench_real.py: the bandwidth-roof arithmetic against hand-worked values, the generate_batch arm's
classified "n/a" on real failures, and one toy-size run of the script (a 2-layer SmolLM2-shaped model) whose
table has the promised columns and whose bandwidth share follows from the numbers it prints. No timing claim."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))
import engine_bench  # noqa: E402
import engine_bench_real as real  # noqa: E402

COLUMNS = ["rows", "prompts x K", "arm", "median ms", "new tok/s", "x vs model.generate", "% matmul roof (full)",
           "% bandwidth roof", "cpu ms"]


def test_smollm2_135m_reads_its_published_parameter_count_per_step():
    from transformers import LlamaConfig, LlamaForCausalLM

    with torch.device("meta"):  # shapes only: no 540 MB of weights
        model = LlamaForCausalLM(LlamaConfig(**real.SMOLLM2_135M))
    # by hand: embedding 49152 x 576 = 28,311,552 (tied: the output layer is the same tensor); per layer
    # q, o 576 x 576 = 331,776 each, k, v 576 x 192 = 110,592 each, MLP 3 x 576 x 1536 = 2,654,208, two norms 1,152
    # -> 3,540,096; x 30 = 106,202,880; final norm 576; total 134,515,008 (SmolLM2-135M's 134.5 M)
    assert engine_bench.n_params(model) == 134_515_008
    cfg = model.config
    weights, kv = real.decode_bytes(134_515_008, cfg, [120] * 8, 32)
    assert weights == 4 * 134_515_008 * 32 == 17_217_921_024
    # K/V per key: 30 layers x (K and V) x 3 heads x 64 dims x 4 bytes = 46,080; keys per row over the 31 decode
    # steps: 121 + ... + 151 = 31 x 120 + 496 = 4,216; 8 rows -> 33,728 keys
    assert kv == 46_080 * 33_728 == 1_554_186_240


def test_kv_term_and_share_on_a_toy_case():
    cfg = SimpleNamespace(num_hidden_layers=2, num_key_value_heads=3, head_dim=64)
    # per key 2 x 2 x 3 x 64 x 4 = 3,072 bytes; prompts 3 and 5, 3 new tokens: decode steps see 4 + 5 and 6 + 7 keys
    weights, kv = real.decode_bytes(1000, cfg, [3, 5], 3)
    assert (weights, kv) == (12_000, 3_072 * 22)
    assert real.decode_bytes(1000, cfg, [3, 5], 1) == (4_000, 0)  # one new token: the prefill pass alone
    assert real.bandwidth_share(1e9, 0.5, 4.0) == pytest.approx(50.0)  # 1 GB in 0.5 s against 4 GB/s


def test_needed_work_prefills_each_distinct_prompt_once():
    cfg = SimpleNamespace(num_attention_heads=1, num_key_value_heads=1, head_dim=1, hidden_size=1, intermediate_size=1,
                          num_hidden_layers=1, vocab_size=1)
    # one layer, every width 1: q/k/v 6 FLOPs a position, o_proj + MLP 8, attention 4 a key, output layer 2.
    # Prefill of a 2-token prompt once: q/k/v 2 x 6, the last position's rest 8 + attention 2 x 4, logits 2 -> 30;
    # each row's one decode step: 6 + 8 + 3 keys x 4 + 2 -> 28; three rows -> 30 + 84 = 114
    assert real.shared_flops(engine_bench.model_flops, cfg, [2], 3, 2) == 114
    assert real.shared_flops(engine_bench.model_flops, cfg, [2], 1, 2) == engine_bench.model_flops(cfg, [2], 2) == 58


def test_bandwidth_probe_reads_the_whole_tensor():
    ticks = iter(range(100))  # a clock that advances 1 s per reading: each sum takes exactly 1 s
    buf = torch.ones(1000)
    assert real.bandwidth_roof(buf, reps=3, clock=lambda: next(ticks)) == pytest.approx(4000 / 1e9)


@pytest.fixture(scope="module")
def small_llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=500, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, tie_word_embeddings=True, eos_token_id=2, pad_token_id=0)
    return LlamaForCausalLM(cfg).float().eval()


def test_generate_batch_arm_gives_exactly_new_tokens_or_a_classified_reason(small_llama):
    prompts = [[5, 6, 7, 8], [9, 10, 11]] * 2
    arm = real.BatchArm(small_llama, prompts, 3)
    try:
        assert arm() == 4 * 3
        short = real.BatchArm(small_llama, prompts, 3, greedy=True)
        short.gen.max_new_tokens = 2  # the library stops a token early: the arm must say so, not time it
        with pytest.raises(real.ArmUnavailable, match=r"^n/a: wrong length: 4 rows gave \[2\] new tokens, not 3$"):
            short()
        broken = real.BatchArm(small_llama, [[5, 6, 999]], 3, greedy=True)  # id past the vocabulary
        times, _, _, unavailable = engine_bench.time_interleaved(
            {"generate_batch": broken, "model.generate": lambda: 3}, 1, {})
        assert re.match(r"^n/a: (missing rows|error): ", unavailable["generate_batch"])
        assert list(times["wall"]) == ["model.generate"]  # left out of the timing, kept in the table by name
    finally:
        arm.close()


def test_rows_not_a_multiple_of_copies_is_one_clear_line():
    proc = subprocess.run([sys.executable, str(BENCH / "engine_bench_real.py"), "--smollm2-shape", "--rows", "8,6",
                           "--copies", "4"], capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert "--rows 6 is not divisible by --copies 4" in proc.stderr


@pytest.mark.slow
def test_toy_run_prints_the_table_and_a_consistent_bandwidth_share():
    args = ["--smollm2-shape", "--tokenizer", "tiny", "--layers", "2", "--rows", "2,4", "--copies", "2", "--new", "2",
            "--prompt-tokens", "16", "--repeats", "1"]
    proc = subprocess.run([sys.executable, str(BENCH / "engine_bench_real.py"), *args], capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    assert "(llama, 35,392,320 parameters, vocabulary 49152" in out  # 28,311,552 + 2 x 3,540,096 + 576
    table = [line for line in out.splitlines() if line.startswith("|")]
    assert [c.strip() for c in table[0].strip("|").split("|")] == COLUMNS
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in table[2:]]
    assert [(r[0], r[1], r[2]) for r in rows] == [
        (n, k, arm) for n, k in (("2", "1 x 2"), ("4", "2 x 2"))
        for arm in ("fast engine", "fast, row copies", "HFEngine", "generate_batch", "model.generate")]
    notes = {int(m[1]): m for m in re.finditer(
        r"rows (\d+): roofs matmul ([\d.]+) GFLOP/s, bandwidth ([\d.]+) GB/s; work ([\d.]+) GFLOP needed .*?"
        r"reads ([\d.]+) MB \(weights ([\d.]+) MB \+ K/V ([\d.]+) MB\)", out)}
    assert sorted(notes) == [2, 4]
    for r in rows:
        n, note = int(r[0]), notes[int(r[0])]
        # weights: 35,392,320 parameters x 4 bytes x 2 forward passes
        assert float(note[6]) == pytest.approx(35_392_320 * 4 * 2 / 1e6, abs=1e-3)
        if r[3].startswith("n/a"):
            assert re.match(r"n/a: (error|missing rows|wrong length): ", r[3]) and r[4:] == ["-"] * 5
            continue
        ms = float(r[3])
        assert float(r[4]) == pytest.approx(n * 2 / (ms / 1e3), rel=0.01, abs=1)  # exactly --new tokens per row
        assert float(r[7]) == pytest.approx(real.bandwidth_share(float(note[5]) * 1e6, ms / 1e3, float(note[3])),
                                            rel=0.01, abs=0.01)
        matmul = float(r[6].split()[0])
        assert matmul == pytest.approx(float(note[4]) / float(note[2]) / (ms / 1e3) * 100, rel=0.01, abs=0.01)
    assert re.search(r"parity \(2 prompts x 2 tokens\): greedy tokens equal the fast engine's: HFEngine 2/2, "
                     r"model.generate 2/2, generate_batch 2/2; greedy log-probs vs the fast engine's: "
                     r"HFEngine \S+ \(within 1e-05\), generate_batch \S+ \(within 1e-05\)", out)
