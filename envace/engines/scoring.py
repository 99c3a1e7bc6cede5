"""Log-prob recomputation for the trainer: the log-probs of given response tokens under the current
weights, at the temperature each row was sampled with (the convention of `envace.engines.base`:
log_softmax(logits / T) over the full vocabulary, T = 1 for greedy rows).

One forward pass over right-padded `[prompt + response]` rows; right padding with a causal mask leaves
every real token's positions 0..n-1, exactly as in generation. Gradients flow (this is the loss input);
wrap the call in `torch.no_grad()` for old / reference log-probs. Logits are kept only from the shortest
prompt's last position on (`logits_to_keep`), and only response positions go through log_softmax, so a
large vocabulary costs memory for the response span rather than for whole sequences.
"""

from __future__ import annotations

from typing import Any

import torch

from envace.engines.base import logprob_temperature


def response_logprobs(model: Any, prompts: list[list[int]], responses: list[list[int]],
                      temperatures: list[float], pad_id: int, *,
                      with_entropy: bool = False) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Per-token log-probs of `responses` given `prompts`.

    Args: B rows of prompt ids (each non-empty), response ids and sampling temperatures; `pad_id`
    fills the right padding (its value never matters: padded positions are masked).
    Returns:
        logprobs (B, L) float32, L = longest response; 0 where mask is 0.
        mask     (B, L) float32, 1 on real response tokens.
        entropy  (B, L) float32 of the full-vocab distribution at T (0 where masked), or None.
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
    attn = torch.zeros((b, total), dtype=torch.long)
    mask = torch.zeros((b, resp_len), dtype=torch.float32)
    targets = torch.zeros((b, resp_len), dtype=torch.long)
    # logits at position t predict token t+1, so response token j of row i is read at len(prompt_i)-1+j
    where = torch.zeros((b, resp_len), dtype=torch.long)
    for i, (p, r) in enumerate(zip(prompts, responses)):
        seq = list(p) + list(r)
        ids[i, :len(seq)] = torch.tensor(seq, dtype=torch.long)
        attn[i, :len(seq)] = 1
        mask[i, :len(r)] = 1.0
        targets[i, :len(r)] = torch.tensor(list(r), dtype=torch.long)
        where[i] = len(p) - 1 + torch.arange(resp_len)
    # Positions before the shortest prompt's last token never predict a response token: skip their logits.
    first = min(len(p) for p in prompts) - 1
    where = (where - first).clamp(max=total - 1 - first)
    ids, attn, mask, targets, where = (t.to(device) for t in (ids, attn, mask, targets, where))

    logits = model(input_ids=ids, attention_mask=attn, use_cache=False, logits_to_keep=total - first).logits
    picked = logits.gather(1, where[:, :, None].expand(-1, -1, logits.shape[-1])).float()  # (B, L, V)
    temps = torch.tensor([logprob_temperature(t) for t in temperatures], dtype=torch.float32, device=device)
    logp_all = torch.log_softmax(picked / temps[:, None, None], dim=-1)
    real = mask > 0
    logprobs = torch.where(real, logp_all.gather(2, targets[:, :, None]).squeeze(2), 0.0)
    entropy = None
    if with_entropy:
        entropy = torch.where(real, -(logp_all.exp() * logp_all).sum(-1), 0.0)
    return logprobs, mask, entropy
