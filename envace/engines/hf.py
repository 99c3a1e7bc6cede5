"""Local batched generation with Hugging Face transformers models (the embedded backend's engine).

A hand-written loop over `model(input_ids, past_key_values=...)` instead of `model.generate`, for the
per-row control RL needs: per-request temperature, top-p, max_new_tokens, stop strings and seed in one
batch (sampling in `envace.engines.fast_sampling`, so a request gives the same tokens alone or batched),
and the sampled token's log-prob under the convention that `envace.engines.logprobs` recomputes.
Prompts are left-padded with explicit position ids; finished rows leave the batch and the KV cache.
A row stops once its decoded continuation contains a stop string; the stop text is kept and `text` is
the decode of `token_ids` (eos / `<|im_end|>` stay in the ids, so the trainer learns to emit them).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from envace.engines.base import GenRequest, GenResult, is_greedy, logprob_temperature
from envace.engines.fast_sampling import row_uniforms, sample_tokens
from envace.models.loading import load_policy, pick_device

SEED_RANGE = 2**62


def stop_token_ids(model: Any, tokenizer: Any) -> set[int]:
    """Token ids that end a generation: the tokenizer's eos, `<|im_end|>` when the vocab has it, and the
    model's generation_config eos ids."""
    ids: set[int] = set()
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    im_end = tokenizer.get_vocab().get("<|im_end|>")
    if im_end is not None:
        ids.add(int(im_end))
    gen_cfg = getattr(model, "generation_config", None)
    eos = getattr(gen_cfg, "eos_token_id", None)
    if eos is not None:
        ids.update(int(e) for e in ([eos] if isinstance(eos, int) else eos))
    return ids


def sample_rows(logits: torch.Tensor, temperatures: list[float], top_ps: list[float],
                uniforms: list[float | None]) -> tuple[torch.Tensor, torch.Tensor]:
    """Pick one token per row and return (tokens (n,), log-probs (n,)).

    logits: (n, V) float32. A greedy row takes the argmax; a sampled row takes the token its uniform u
    selects under the convention of `envace.engines.fast_sampling` (inverse CDF in vocabulary order at
    top_p = 1; over the nucleus in descending-probability order otherwise). The log-prob is always the
    full-vocab log_softmax(logits / T) of the chosen token (T = 1 for greedy).
    """
    dev = logits.device
    greedy = [is_greedy(t) for t in temperatures]
    temps = torch.tensor([logprob_temperature(t) for t in temperatures], dtype=logits.dtype, device=dev)
    top_p = torch.tensor([1.0 if g else float(p) for g, p in zip(greedy, top_ps)], dtype=torch.float64, device=dev)
    u = torch.tensor([0.0 if g else float(x) for g, x in zip(greedy, uniforms)], dtype=torch.float64, device=dev)
    return sample_tokens(logits, temps, torch.tensor(greedy, device=dev), top_p, u,
                         any_greedy=any(greedy), any_nucleus=bool((top_p < 1.0).any()))



def generate_in_length_order(requests: list[GenRequest], max_batch: int,
                             run_batch: Callable[[list[GenRequest]], list[GenResult]]) -> list[GenResult]:
    """Validate `requests`, run them in chunks of `max_batch` sorted by prompt length (longest first), and
    return the results in request order. Rows are independent, so grouping similar lengths only saves
    padding. Shared by every local engine."""
    validate_requests(requests)
    order = sorted(range(len(requests)), key=lambda i: -len(requests[i].prompt_ids))
    results: list[GenResult | None] = [None] * len(requests)
    for start in range(0, len(order), max_batch):
        chunk = order[start:start + max_batch]
        for i, res in zip(chunk, run_batch([requests[i] for i in chunk])):
            results[i] = res
    return results  # type: ignore[return-value]


def validate_requests(requests: list[GenRequest]) -> None:
    """A one-line error naming the first request a local engine cannot run."""
    for i, r in enumerate(requests):
        if not r.prompt_ids:
            raise ValueError(f"request {i} has an empty prompt; pass at least one prompt token")
        if r.max_new_tokens < 1:
            raise ValueError(f"request {i} has max_new_tokens={r.max_new_tokens}; it must be >= 1")
        if not 0.0 < r.top_p <= 1.0:
            raise ValueError(f"request {i} has top_p={r.top_p}; it must be in (0, 1]")


def build_result(tokenizer: Any, stop_ids: set[int], ids: list[int], lps: list[float], finish: str,
                 matched: str | None, seed: int, prompt_len: int) -> GenResult:
    """A local engine's `GenResult`: eos / `<|im_end|>` kept in the ids but left out of the text."""
    shown = ids[:-1] if ids and ids[-1] in stop_ids else ids
    text = tokenizer.decode(shown, skip_special_tokens=False)
    return GenResult(token_ids=ids, logprobs=lps, text=text, finish_reason=finish,
                     meta={"seed": seed, "stop": matched, "prompt_tokens": prompt_len})


class HFEngine:
    """`GenerationEngine` over a local transformers causal LM. Holds no gradients."""

    name = "hf"

    def __init__(self, model: Any, tokenizer: Any, device: str | torch.device | None = None,
                 max_batch: int = 64) -> None:
        if max_batch < 1:
            raise ValueError(f"max_batch {max_batch} must be >= 1")
        self.device = torch.device(device) if device is not None else pick_device()
        self.model = model.to(self.device)
        self.tokenizer = tokenizer
        self.max_batch = max_batch
        self.stop_ids = stop_token_ids(model, tokenizer)
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        if pad is None:
            raise ValueError("the tokenizer has neither a pad nor an eos token; set tokenizer.pad_token")
        self.pad_id = int(pad)

    @classmethod
    def from_path(cls, path: str | Path, device: str | torch.device | None = None,
                  dtype: torch.dtype | str | None = None, max_batch: int = 64) -> HFEngine:
        model, tokenizer = load_policy(path, device=device, dtype=dtype)
        return cls(model, tokenizer, device=model.device, max_batch=max_batch)

    def generate(self, requests: list[GenRequest]) -> list[GenResult]:
        return generate_in_length_order(requests, self.max_batch, self._generate_batch)

    @torch.inference_mode()
    def _generate_batch(self, reqs: list[GenRequest]) -> list[GenResult]:
        dev, b = self.device, len(reqs)
        width = max(len(r.prompt_ids) for r in reqs)
        ids = torch.full((b, width), self.pad_id, dtype=torch.long, device=dev)
        mask = torch.zeros((b, width), dtype=torch.long, device=dev)
        for i, r in enumerate(reqs):
            ids[i, width - len(r.prompt_ids):] = torch.tensor(r.prompt_ids, dtype=torch.long)
            mask[i, width - len(r.prompt_ids):] = 1
        pos = (mask.cumsum(-1) - 1).clamp(min=0)
        seeds = [r.seed if r.seed is not None else int(torch.randint(0, SEED_RANGE, (1,))) for r in reqs]
        # Each row's uniforms, drawn up front: the same stream as one draw per token.
        draws = [row_uniforms(s, r.max_new_tokens).tolist() for s, r in zip(seeds, reqs)]

        out = self.model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True, logits_to_keep=1)
        cache, logits = out.past_key_values, out.logits[:, -1].float()
        next_pos = pos[:, -1] + 1
        tokens: list[list[int]] = [[] for _ in reqs]
        logprobs: list[list[float]] = [[] for _ in reqs]
        finish: list[str] = ["length"] * b
        matched: list[str | None] = [None] * b
        active = list(range(b))  # request index of each live batch row
        while True:
            live = [reqs[i] for i in active]
            uniforms = [None if is_greedy(r.temperature) else draws[i][len(tokens[i])]
                        for i, r in zip(active, live)]
            tok, lp = sample_rows(logits, [r.temperature for r in live], [r.top_p for r in live], uniforms)
            keep: list[int] = []
            for row, (i, t, p) in enumerate(zip(active, tok.tolist(), lp.tolist())):
                tokens[i].append(t)
                logprobs[i].append(p)
                if t in self.stop_ids:
                    finish[i], matched[i] = "stop", self.tokenizer.convert_ids_to_tokens(t)
                elif reqs[i].stop and (hit := self._stop_hit(tokens[i], reqs[i].stop)) is not None:
                    finish[i], matched[i] = "stop", hit
                elif len(tokens[i]) < reqs[i].max_new_tokens:
                    keep.append(row)
            if not keep:
                break
            if len(keep) < len(active):
                sel = torch.tensor(keep, device=dev)
                cache.batch_select_indices(sel)
                mask, next_pos, tok = mask[sel], next_pos[sel], tok[sel]
                active = [active[j] for j in keep]
            mask = torch.cat([mask, mask.new_ones((len(active), 1))], dim=1)
            out = self.model(input_ids=tok[:, None], attention_mask=mask, position_ids=next_pos[:, None],
                             past_key_values=cache, use_cache=True)
            cache, logits = out.past_key_values, out.logits[:, -1].float()
            next_pos = next_pos + 1
        return [self._result(tokens[i], logprobs[i], finish[i], matched[i], seeds[i], len(reqs[i].prompt_ids))
                for i in range(b)]

    def _stop_hit(self, ids: list[int], stops: list[str]) -> str | None:
        text = self.tokenizer.decode(ids, skip_special_tokens=False)
        return next((s for s in stops if s and s in text), None)

    def _result(self, ids: list[int], lps: list[float], finish: str, matched: str | None, seed: int,
                prompt_len: int) -> GenResult:
        return build_result(self.tokenizer, self.stop_ids, ids, lps, finish, matched, seed, prompt_len)
