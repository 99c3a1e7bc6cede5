"""Log-prob recomputation for the trainer: the log-probs of given response tokens under the current weights,
at the temperature each token was sampled with (log_softmax(logits / T) over the full vocabulary, T = 1
for greedy rows: the convention of `envace.engines.base`).

`token_logprobs` is the one forward over right-padded sequences (P, T) and N read positions (sequence,
position, token, temperature); several responses may be read from one packed sequence. The output layer
and log_softmax run only on the N gathered hidden states (architectures in `_PLAIN_HEAD_TYPES`; others,
or `full_logits=True`, take the full-logits reference path), so their cost scales with the response
tokens. Gradients flow; wrap old / reference log-probs in `torch.no_grad()`.

`prefix_logprobs` is the same readout over sequences that share prefixes: right-padded trunks run once
with the model's KV cache, then each branch (the tokens after its trunk) runs against its trunk's cached
keys and values (a 2D mask hides the trunk's padding; position ids continue from the trunk's real
length), so a branch token computes what it computes in the full sequence. Needs a cache (no gradient
checkpointing) and full attention in every layer (`prefix_supported`). Trunks whose outputs are read nowhere
(envace.trainers.packing ends a trunk before its first read where that pays) run only to the last layer's keys
and values (`trunk_keys`): that layer's attention, output projection and MLP, and the final norm, are skipped
for every trunk token. Where the model runs `envace_sdpa`
(CPU models; `trunk_split_supported`) a branch pass hands its trunks to the attention instead of giving every
branch row a copy of its trunk's keys (envace.models.trunk_attention: one softmax split at the trunk).
"""

from __future__ import annotations

from typing import Any

import torch

from envace.engines.base import logprob_temperature
from envace.models.attention import NAME as NATIVE_GQA
from envace.models.trunk_attention import TRUNK_KWARG, BranchTrunks, split_pays

# model_type values whose CausalLM computes logits as plain lm_head(base(x).last_hidden_state): no
# soft-capping, logit scale or other post-processing (those would need the full-logits path).
_PLAIN_HEAD_TYPES = frozenset({"qwen2", "qwen3", "llama", "mistral", "qwen2_moe", "qwen3_moe", "phi3"})


def _split_head(model: Any) -> tuple[Any, torch.nn.Linear] | None:
    """(base model, output layer) when logits are exactly output_layer(base hidden state), else None."""
    cfg = getattr(model, "config", None)
    if getattr(cfg, "model_type", None) not in _PLAIN_HEAD_TYPES:
        return None
    base = getattr(model, getattr(model, "base_model_prefix", "") or "", None)
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if base is None or base is model or not isinstance(head, torch.nn.Linear):
        return None
    return base, head


def token_logprobs(model: Any, ids: torch.Tensor, seq_idx: torch.Tensor, pos_idx: torch.Tensor,
                   targets: torch.Tensor, temps: torch.Tensor, *, with_entropy: bool = False,
                   entropy_grad: bool = True, full_logits: bool = False,
                   position_ids: torch.Tensor | None = None,
                   attention_mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probs (N,) of `targets` read at logits position (seq_idx, pos_idx) of right-padded `ids` (P, T).

    The logits at position t predict token t+1, so a response token at position s is read at s - 1.
    `temps` (N,) are logprob temperatures (> 0). Returns (log-probs, entropy of the full-vocab
    distribution at T or None), both in the model's dtype promoted to at least float32. With
    entropy_grad=False the entropy is a detached metric (no (N, V) tensor kept for the backward pass).
    `position_ids` (P, T) and a prepared 4D `attention_mask` are passed through (tree packing); by default
    positions are 0..T-1 and attention is causal.
    """
    split = None if full_logits else _split_head(model)
    if split is not None:
        base, head = split
        hidden = base(input_ids=ids, use_cache=False, position_ids=position_ids,
                      attention_mask=attention_mask).last_hidden_state
        logits = head(hidden[seq_idx, pos_idx])
    else:
        logits = model(input_ids=ids, use_cache=False, position_ids=position_ids,
                       attention_mask=attention_mask).logits[seq_idx, pos_idx]
    return _read(logits, targets, temps, with_entropy, entropy_grad)


def _read(logits: torch.Tensor, targets: torch.Tensor, temps: torch.Tensor, with_entropy: bool,
          entropy_grad: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probs of `targets` under log_softmax(logits / temps), and the entropy when asked."""
    logits = logits.to(torch.promote_types(logits.dtype, torch.float32))
    if not bool((temps == 1).all()):
        logits = logits / temps.to(logits.dtype)[:, None]
    logp_all = torch.log_softmax(logits, dim=-1)
    logp = logp_all.gather(1, targets[:, None]).squeeze(1)
    entropy = None
    if with_entropy and entropy_grad and torch.is_grad_enabled():
        entropy = -(logp_all.exp() * logp_all).sum(-1)
    elif with_entropy:
        entropy = entropy_metric(logp_all.detach())
    return logp, entropy


# elements of the log-prob table one entropy chunk reads: its exp and product stay in the core's cache
ENTROPY_CHUNK = 2 ** 17


def entropy_metric(logp_all: torch.Tensor) -> torch.Tensor:
    """-(exp(l) * l).sum(-1) per row of a log-prob table (N, V), without gradient: in row chunks of about
    `ENTROPY_CHUNK` elements (at least 16 rows), so the exp and the product are made and summed in cache
    instead of as two more (N, V) tables; the same values as the whole-table expression."""
    rows = max(16, ENTROPY_CHUNK // max(logp_all.shape[-1], 1))
    out = torch.empty(logp_all.shape[:-1], dtype=logp_all.dtype, device=logp_all.device)
    with torch.no_grad():
        for i in range(0, logp_all.shape[0], rows):
            part = logp_all[i:i + rows]
            torch.sum(part.exp().mul_(part), dim=-1, out=out[i:i + rows])
    return out.neg_()


def layer_count(model: Any) -> int:
    """The model's decoder layers (config.num_hidden_layers; 0 where it has none)."""
    return int(getattr(getattr(model, "config", None), "num_hidden_layers", 0) or 0)


def prefix_supported(model: Any) -> str | None:
    """None when `prefix_logprobs` can run `model`, else the reason (a sliding-window layer, gradient
    checkpointing, which turns the KV cache off)."""
    if getattr(model, "is_gradient_checkpointing", False):
        return "gradient checkpointing turns the KV cache off"
    cfg = getattr(model, "config", None)
    types = getattr(cfg, "layer_types", None)
    if types is not None:
        if any(t != "full_attention" for t in types):
            return f"layers of type {sorted(set(types) - {'full_attention'})} (only full attention shares a prefix)"
    elif getattr(cfg, "sliding_window", None) is not None:
        return "a sliding attention window (only full attention shares a prefix)"
    return None


def trunk_split_supported(model: Any) -> bool:
    """Whether branch passes of `model` can read their trunks once per trunk (envace.models.trunk_attention):
    its attention is `envace_sdpa` (CPU models, envace.models.attention) and has no dropout."""
    cfg = getattr(model, "config", None)
    return getattr(cfg, "_attn_implementation", None) == NATIVE_GQA and not getattr(cfg, "attention_dropout", 0.0)


class _KeysStored(Exception):
    """Raised by `_KeysOnlyCache` once the last layer's keys and values are in it."""


def trunk_keys(net: Any, trunk_ids: torch.Tensor):
    """The model's KV cache of `trunk_ids`, every layer's keys and values (with their gradient), without the
    rest of the last layer (its attention, output projection and MLP) or the final norm: the forward stops
    where the last layer hands its keys and values to the cache. None where the model did not use the cache
    (gradient checkpointing)."""
    from transformers import DynamicCache

    class _KeysOnlyCache(DynamicCache):
        def update(self, key_states, value_states, layer_idx, *args, **kwargs):
            out = super().update(key_states, value_states, layer_idx, *args, **kwargs)
            if layer_idx == net.config.num_hidden_layers - 1:
                raise _KeysStored
            return out

    cache = _KeysOnlyCache(config=net.config)
    try:
        net(input_ids=trunk_ids, past_key_values=cache, use_cache=True)
    except _KeysStored:
        return cache
    return None


def prefix_logprobs(model: Any, trunk_ids: torch.Tensor, trunk_lens: torch.Tensor,
                    chunks: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]], read: torch.Tensor,
                    targets: torch.Tensor, temps: torch.Tensor, *, with_entropy: bool = False,
                    entropy_grad: bool = True,
                    full_logits: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probs (N,) of `targets` over trunks and the branches that continue them (module docstring).

    `trunk_ids` (P, Tt) right-padded, `trunk_lens` (P,) real lengths (Tt = 0: no trunk, the branches run
    alone). Each chunk is one forward of branches: ids (B, Tb) right-padded, their real lengths (B,) and the
    trunk each continues (B,). The logits read for target n are those of row `read[n]` of the state table
    [trunk positions, P x Tt row-major; then each chunk's positions, B x Tb row-major, in chunk order].
    Returns as `token_logprobs`.
    """
    from transformers import DynamicCache  # the model's own cache class: keys/values after RoPE and norms

    split = None if full_logits else _split_head(model)
    net = model if split is None else split[0]

    def states(out):
        return out.logits if split is None else out.last_hidden_state

    dev = trunk_ids.device
    width = trunk_ids.shape[1]
    table, kv = [], None
    trunk_rows = trunk_ids.shape[0] * width
    if width:  # no trunk (width 0): every branch is a whole sequence
        if bool((read < trunk_rows).any()):
            out = net(input_ids=trunk_ids, use_cache=True)
            cache = out.past_key_values
            table.append(states(out).flatten(0, 1))
        else:  # the trunk's outputs are read nowhere: its pass stops at the last layer's keys and values
            cache = trunk_keys(net, trunk_ids)
            read = read - trunk_rows
        if cache is None or not getattr(cache, "layers", None):
            raise ValueError("prefix packing needs the model's KV cache (use_cache); gradient checkpointing turns "
                             "it off: use algo.pack=tree")
        kv = [(layer.keys, layer.values) for layer in cache.layers]
        trunk_mask = (torch.arange(width, device=dev)[None] < trunk_lens[:, None]).long()
    by_trunk = kv is not None and trunk_split_supported(net)
    for ids, lens, trunks in chunks:
        tb = ids.shape[1]
        if kv is None:  # right-padded and causal: no real token sees a pad, so no mask is needed
            table.append(states(net(input_ids=ids, use_cache=False)).flatten(0, 1))
            continue
        pos = trunk_lens.index_select(0, trunks)[:, None] + torch.arange(tb, device=dev)[None]
        if by_trunk and split_pays(width, tb):  # each trunk read once for its rows (envace.models.trunk_attention)
            out = net(input_ids=ids, position_ids=pos, use_cache=False,
                      **{TRUNK_KWARG: BranchTrunks(kv, trunk_mask.bool(), trunks)})
            table.append(states(out).flatten(0, 1))
            continue
        past = DynamicCache(ddp_cache_data=[(k.index_select(0, trunks), v.index_select(0, trunks)) for k, v in kv])
        mask = torch.cat([trunk_mask.index_select(0, trunks),
                          (torch.arange(tb, device=dev)[None] < lens[:, None]).long()], dim=1)
        table.append(states(net(input_ids=ids, past_key_values=past, attention_mask=mask, position_ids=pos,
                                use_cache=True)).flatten(0, 1))
    picked = torch.cat(table)[read]
    logits = picked if split is None else split[1](picked)
    return _read(logits, targets, temps, with_entropy, entropy_grad)


def response_logprobs(model: Any, prompts: list[list[int]], responses: list[list[int]],
                      temperatures: list[float], pad_id: int, *, with_entropy: bool = False,
                      full_logits: bool = False) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Per-token log-probs of `responses` given `prompts`, one unpacked row per sequence.

    Args: B rows of prompt ids (each non-empty), response ids and sampling temperatures; `pad_id`
    fills the right padding (its value never matters: padded positions are never read).
    Returns:
        logprobs (B, L), L = longest response; 0 where mask is 0.
        mask     (B, L) float32, 1 on real response tokens.
        entropy  (B, L) of the full-vocab distribution at T (0 where masked), or None.
    Rows with an empty response have an all-zero mask.
    """
    b = len(prompts)
    if not (len(responses) == len(temperatures) == b):
        raise ValueError(f"got {b} prompts, {len(responses)} responses and {len(temperatures)} temperatures; "
                         f"pass one of each per row")
    for i, p in enumerate(prompts):
        if not p:
            raise ValueError(f"prompt {i} is empty; the first response token needs at least one prompt token")
    device = next(model.parameters()).device
    resp_len = max((len(r) for r in responses), default=0)
    total = max(len(p) + len(r) for p, r in zip(prompts, responses))
    ids = torch.full((b, total), int(pad_id), dtype=torch.long)
    seq_idx, pos_idx, targets, temps, cols = [], [], [], [], []
    for i, (p, r, t) in enumerate(zip(prompts, responses, temperatures)):
        seq = list(p) + list(r)
        ids[i, :len(seq)] = torch.tensor(seq, dtype=torch.long)
        seq_idx += [i] * len(r)
        pos_idx += range(len(p) - 1, len(p) - 1 + len(r))
        targets += r
        temps += [logprob_temperature(t)] * len(r)
        cols += range(len(r))
    mask = torch.zeros((b, resp_len), dtype=torch.float32, device=device)
    if not targets:
        zeros = torch.zeros((b, resp_len), device=device)
        return zeros, mask, (zeros.clone() if with_entropy else None)
    rows_t = torch.tensor(seq_idx, device=device)
    cols_t = torch.tensor(cols, device=device)
    lp, ent = token_logprobs(model, ids.to(device), rows_t, torch.tensor(pos_idx, device=device),
                             torch.tensor(targets, device=device), torch.tensor(temps, device=device),
                             with_entropy=with_entropy, full_logits=full_logits)
    mask[rows_t, cols_t] = 1.0
    logprobs = torch.zeros((b, resp_len), dtype=lp.dtype, device=device).index_put((rows_t, cols_t), lp)
    entropy = None
    if ent is not None:
        entropy = torch.zeros((b, resp_len), dtype=ent.dtype, device=device).index_put((rows_t, cols_t), ent)
    return logprobs, mask, entropy
