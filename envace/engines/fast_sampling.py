"""Token sampling shared by the HF and fast engines: one vectorised pass over a batch of logit rows.

The chosen token's log-prob is the full-vocab log_softmax(logits / T) (T = 1 for greedy rows; the
convention of `envace.engines.base`). Each sampled row draws one uniform u per token from the request's
own `torch.Generator` (`row_uniforms`), so a request gives the same tokens alone or in any batch.
u selects by inverse CDF: at top_p = 1 over the probabilities in vocabulary order (O(V), no sort); at
top_p < 1 over the nucleus in descending-probability order (ties by id), taken from a top-k slice when
the nucleus fits inside it, else from a full sort (the same token either way).
"""

from __future__ import annotations

import torch

# Size of the top-k slice a nucleus row is first tried on; most nuclei of a trained model are far smaller.
TOPK_SLICE = 64


def row_uniforms(seed: int, n: int) -> torch.Tensor:
    """The n uniforms a sampled row consumes, token by token (the same stream as n one-value draws)."""
    return torch.rand(n, generator=torch.Generator().manual_seed(seed))


def sample_tokens(logits: torch.Tensor, temps: torch.Tensor, greedy: torch.Tensor, top_p: torch.Tensor,
                  u: torch.Tensor, *, any_greedy: bool, any_nucleus: bool,
                  any_temperature: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """Pick one token per row; return (tokens (n,) long, log-probs (n,) float32).

    logits (n, V) float32; temps (n,) the log-prob temperature of each row (1 for greedy rows); greedy (n,)
    bool; top_p (n,) float64; u (n,) float64 uniforms (ignored on greedy rows). `any_greedy` /
    `any_nucleus` say whether any row is greedy / has top_p < 1, so the common all-sampled top_p = 1 batch
    skips the masking work; `any_temperature` False says every temperature is 1, so the division (by 1: the
    same values) is skipped.
    """
    logp = torch.log_softmax(logits / temps[:, None] if any_temperature else logits, dim=-1)
    cum = logp.exp().cumsum(dim=-1, dtype=torch.float64)
    pick = torch.searchsorted(cum, (u * cum[:, -1])[:, None], right=True).squeeze(1)
    tokens = pick.clamp_(max=logits.shape[-1] - 1)
    if any_nucleus:
        rows = (~greedy & (top_p < 1.0)).nonzero().squeeze(1)
        if rows.numel():
            tokens[rows] = _nucleus(logp[rows].double().exp(), top_p[rows], u[rows])
    if any_greedy:
        tokens = torch.where(greedy, logits.argmax(dim=-1), tokens)
    return tokens, logp.gather(1, tokens[:, None]).squeeze(1)


def _nucleus(probs: torch.Tensor, top_p: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Inverse CDF over each row's nucleus in descending-probability order (stable: ties by id)."""
    v = probs.shape[-1]
    k = min(TOPK_SLICE, v - 1)
    if k >= 1:
        vals, idx = probs.topk(k + 1, dim=-1)  # one extra value to see whether the slice edge is a tie
        # Re-sort the slice by (probability desc, id asc) so tied values are in the full sort's order.
        idx_sorted, perm = idx[:, :k].sort(dim=-1)
        vals_by_id = vals[:, :k].gather(1, perm)
        vals_k, order = vals_by_id.sort(dim=-1, descending=True, stable=True)
        picked = _inverse_cdf(vals_k, idx_sorted.gather(1, order), top_p, u)
        fits = (vals_k.cumsum(-1)[:, -1] >= top_p) & (vals[:, k - 1] != vals[:, k])
        if bool(fits.all()):
            return picked
    else:
        fits = torch.zeros(probs.shape[0], dtype=torch.bool, device=probs.device)
        picked = torch.zeros(probs.shape[0], dtype=torch.long, device=probs.device)
    rest = (~fits).nonzero().squeeze(1)
    sorted_p, order = torch.sort(probs[rest], dim=-1, descending=True, stable=True)
    picked[rest] = _inverse_cdf(sorted_p, order, top_p[rest], u[rest])
    return picked


def _inverse_cdf(sorted_p: torch.Tensor, ids: torch.Tensor, top_p: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    cum = sorted_p.cumsum(dim=-1)
    n_keep = ((cum - sorted_p) < top_p[:, None]).sum(dim=-1).clamp(min=1)
    kept_mass = cum.gather(1, (n_keep - 1)[:, None])
    pick = torch.searchsorted(cum, u[:, None] * kept_mass, right=True)
    pick = torch.minimum(pick, (n_keep - 1)[:, None])
    return ids.gather(1, pick).squeeze(1)
