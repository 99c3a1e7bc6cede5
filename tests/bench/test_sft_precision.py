"""bench/sft_precision.py: its attention casts let an SFT batch run under bfloat16 autocast through both of
envace's attention paths (transformers' sdpa and the trunk-split branch attention), close to the float32 loss,
and put the functions back on exit; the matmul probe reports both rates. No timing claim."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import sft_precision  # noqa: E402


def _batch(tok):
    from envace.trainers.sft_samples import Sample
    from envace.types import Role

    ids = tok.encode("the tool world answers every call with a record of the order and its status " * 3,
                     add_special_tokens=False)
    prefix = ids[:48]  # a trunk wider than every branch, saving more than a pass costs: the branch pass splits
    return [Sample.of(Role.ACT, prefix, ids[48 + 3 * i:52 + 3 * i]) for i in range(8)]


def test_both_attention_dtypes_run_under_autocast_near_the_float32_loss(tiny_dir, monkeypatch):
    import envace.models.attention as attention
    from envace.models.loading import load_policy
    from envace.models.trunk_attention import _SplitAttention
    from envace.trainers.sft import batch_loss

    model, tok = load_policy(tiny_dir, device="cpu")
    batch = _batch(tok)
    split_calls: list[torch.dtype] = []
    apply = _SplitAttention.apply
    monkeypatch.setattr(_SplitAttention, "apply", lambda q, *rest: (split_calls.append(q.dtype), apply(q, *rest))[1])
    before = (torch.nn.functional.scaled_dot_product_attention, attention.split_attention)
    with torch.no_grad():
        reference = float(batch_loss(model, batch, tok.pad_token_id, True)[0])
        for dtype in (torch.bfloat16, torch.float32):
            split_calls.clear()
            with torch.autocast("cpu", dtype=torch.bfloat16), sft_precision.attention_in(dtype):
                loss = float(batch_loss(model, batch, tok.pad_token_id, True)[0])
            assert split_calls and set(split_calls) == {dtype}  # the branch pass ran the split, in that dtype
            assert abs(loss - reference) < 0.02 * abs(reference), (dtype, loss, reference)
            assert (torch.nn.functional.scaled_dot_product_attention, attention.split_attention) == before


def test_matmul_probe_reports_both_rates():
    (shape, f32, bf16), = sft_precision.matmul_rates([(64, 32, 48)], reps=2)
    assert shape == (64, 32, 48) and f32 > 0 and bf16 > 0
