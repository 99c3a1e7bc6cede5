"""transformers' SDPA attention with grouped-query attention left to the kernel on CPU, mask or no mask.

transformers' `sdpa` attention passes `enable_gqa=True` only when no attention mask is given; with one it
first repeats every key/value head to the query heads (`repeat_kv`, a copy of K and V per layer, and in the
backward a sum of the copies). envace's training passes carry a mask on every branch pass (the trunk's
columns and the causal branch, envace.engines.logprobs.prefix_logprobs), and torch's CPU flash attention
takes grouped heads with a mask directly. `use_native_gqa` registers the same computation under its own
name, `envace_sdpa` (same mask construction as `sdpa`, same arguments to
`torch.nn.functional.scaled_dot_product_attention`, only `enable_gqa=True` where the head counts differ),
and switches a CPU model loaded with `sdpa` to it. The outputs are the same; the branch-pass attention's
forward + backward is faster (`bench/branch_attention_bench.py`). Not in the paper: an execution choice of
the embedded CPU backend. The saved config keeps no trace of it (transformers does not write the
attention implementation to config.json). transformers' continuous batching (`model.generate_batch`) pages
only transformers' own implementations: switch such a model back with `model.set_attn_implementation("sdpa")`
first (the benches' baseline arms run such a copy).
"""

from __future__ import annotations

from typing import Any

import torch

from envace.models.trunk_attention import TRUNK_KWARG, split_attention

NAME = "envace_sdpa"


def sdpa_native_gqa(module: Any, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                    attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                    is_causal: bool | None = None, **kwargs: Any) -> tuple[torch.Tensor, None]:
    """An attention function for transformers' AttentionInterface: query (B, H, q, d) against key and value
    (B, KVH, k, d); returns (B, q, H, d) and no weights, as transformers' `sdpa` does. A branch pass that hands
    its trunks over (`TRUNK_KWARG`, envace.models.trunk_attention) gets the split attention: its own keys
    causal, its trunk's read once per trunk; the mask is then unused."""
    trunks = kwargs.get(TRUNK_KWARG)
    if trunks is not None:
        if dropout:
            raise ValueError("the trunk-split branch attention runs without dropout; set attention_dropout to 0 "
                             "or use algo.pack=tree")
        scale = scaling if scaling is not None else query.shape[-1] ** -0.5
        return split_attention(query, key, value, trunks, module.layer_idx, scale).transpose(1, 2).contiguous(), None
    causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    # as `sdpa`: the kernel's own causal flag only for a mask-free prefill (never for one query token)
    causal = bool(query.shape[2] > 1 and attention_mask is None and causal)
    out = torch.nn.functional.scaled_dot_product_attention(
        query, key, value, attn_mask=attention_mask, dropout_p=dropout, scale=scaling, is_causal=causal,
        enable_gqa=query.shape[1] != key.shape[1])
    return out.transpose(1, 2).contiguous(), None


def register() -> None:
    """`envace_sdpa` in transformers' attention and mask interfaces (idempotent)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(NAME, sdpa_native_gqa)
    AttentionMaskInterface.register(NAME, sdpa_mask)


def use_native_gqa(model: Any) -> bool:
    """Switch `model` from `sdpa` to `envace_sdpa` when it runs on CPU; True if switched. Other attention
    implementations, and models off CPU, are left as they are."""
    config = getattr(model, "config", None)
    if getattr(config, "_attn_implementation", None) != "sdpa" or not hasattr(model, "set_attn_implementation"):
        return False
    if next(model.parameters()).device.type != "cpu":
        return False
    register()
    model.set_attn_implementation(NAME)
    return True
