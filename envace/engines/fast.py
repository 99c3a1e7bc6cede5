"""The fast embedded generation engine: `GenerationEngine` over a Qwen3 or Llama-family model with a static
KV cache (arithmetic in `envace.engines.fast_model.DecoderKernel`).

Same contract and results as `envace.engines.hf.HFEngine`, the reference kept for models this one cannot
run (`envace.engines.factory.make_engine` chooses): a request gives the same tokens alone, in any batch
and in either engine, up to float rounding of the logits. Where it saves time: prefill of prompt grids
into one static cache; a prompt repeated in the batch, as a task's K samples are, prefilled once into a
trunk cache whose K/V a decode step reads once for all its rows (`share_prompts`); sampling without a
vocabulary sort; finished rows dropped in one copy once a quarter of the batch has finished; stop strings
checked on a tail window of the decode (a hit is confirmed on the full decode, so the stop point is
HFEngine's). On CPU at more than one torch thread a call runs in thread shards (envace.thread_shards: the
requests cut into one shard per thread, a prompt's copies kept together so it is still prefilled once,
each shard generated in its own thread at one torch thread); a request's result is what it gets alone.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from envace.engines.base import GenRequest, GenResult, is_greedy, logprob_temperature
from envace.engines.fast_model import DecoderKernel, unsupported_reason
from envace.engines.fast_sampling import row_uniforms, sample_tokens
from envace.engines.hf import SEED_RANGE, build_result, generate_in_length_order, stop_token_ids, validate_requests
from envace.engines.kv_cache import KVCache, TrunkIndex
from envace.models.loading import pick_device
from envace.thread_shards import ShardRunner, balanced_shards

__all__ = ["FastEngine", "unsupported_reason"]

# A row's tail window for stop strings: the stop's UTF-8 bytes plus this many tokens (a token that ends
# the previous character, and slack for a window starting inside a multi-byte character).
STOP_WINDOW_SLACK = 3


class FastEngine:
    """`GenerationEngine` over a local Qwen3ForCausalLM or LlamaForCausalLM (see module docstring). Holds no
    gradients."""

    name = "fast"

    def __init__(self, model: Any, tokenizer: Any, device: str | torch.device | None = None,
                 max_batch: int = 64, prefill_tokens: int = 2048, shards: int | None = None,
                 share_prompts: bool = True) -> None:
        if max_batch < 1:
            raise ValueError(f"max_batch {max_batch} must be >= 1")
        if shards is not None and shards < 1:
            raise ValueError(f"shards {shards} must be >= 1 (None: one per torch thread on CPU)")
        self.device = torch.device(device) if device is not None else pick_device()
        self.model = model.to(self.device)
        self.kernel = DecoderKernel(self.model)
        self.tokenizer = tokenizer
        self.max_batch = max_batch
        self.prefill_tokens = prefill_tokens
        self.stop_ids = stop_token_ids(model, tokenizer)
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        if pad is None:
            raise ValueError("the tokenizer has neither a pad nor an eos token; set tokenizer.pad_token")
        self.pad_id = int(pad)
        self.shards = shards  # None: one per torch thread of the calling process, on CPU
        # a prompt's rows decode from one trunk cache (False: each row a copy, the layout before; benches)
        self.share_prompts = share_prompts
        self._runner: ShardRunner | None = None

    def generate(self, requests: list[GenRequest]) -> list[GenResult]:
        n = 1 if self.device.type != "cpu" else (self.shards or torch.get_num_threads())
        if n > 1:  # a prompt asked for several times (a task's K samples) stays in one shard: prefilled once
            groups: dict[tuple[int, ...], list[int]] = {}
            for i, r in enumerate(requests):
                groups.setdefault(tuple(r.prompt_ids), []).append(i)
            n = min(n, len(groups))
        if n <= 1:
            return generate_in_length_order(requests, self.max_batch, self._generate_batch)
        validate_requests(requests)  # named by their index in this call, not in a shard
        # shared state is set here, so the shard threads only read it: the fused weights, the RoPE table and
        # the seeds of seedless requests (drawn from torch's global generator in request order)
        self.kernel.refresh()
        self.kernel.rope_table(max(len(r.prompt_ids) + r.max_new_tokens for r in requests))
        requests = [r if r.seed is not None else dataclasses.replace(r, seed=int(torch.randint(0, SEED_RANGE, (1,))))
                    for r in requests]
        members = list(groups.values())
        cost = [sum(len(requests[i].prompt_ids) + requests[i].max_new_tokens for i in g) for g in members]
        parts = [[i for k in part for i in members[k]] for part in balanced_shards(cost, n)]
        if self._runner is None or self._runner.n_threads != n:
            if self._runner is not None:
                self._runner.close()
            self._runner = ShardRunner(n)
        # each pool thread sets its own torch threads to one (the setting is per thread), so callers on
        # several threads never see the process-wide setting change
        outs = self._runner.map(lambda idx: generate_in_length_order(
            [requests[i] for i in idx], self.max_batch, self._generate_batch), parts)
        results: list[GenResult | None] = [None] * len(requests)
        for idx, out in zip(parts, outs):
            for i, res in zip(idx, out):
                results[i] = res
        return results  # type: ignore[return-value]

    @torch.inference_mode()
    def _generate_batch(self, reqs: list[GenRequest]) -> list[GenResult]:
        kern, dev, b = self.kernel, self.device, len(reqs)
        kern.refresh()
        width = max(len(r.prompt_ids) for r in reqs)
        max_new = max(r.max_new_tokens for r in reqs)
        kern.rope_table(width + max_new)
        cache, trunk, index, logits = self._prefill_rows(reqs, width, max_new)

        seeds = [r.seed if r.seed is not None else int(torch.randint(0, SEED_RANGE, (1,))) for r in reqs]
        greedy_l = [is_greedy(r.temperature) for r in reqs]
        temps = torch.tensor([logprob_temperature(r.temperature) for r in reqs], dtype=torch.float32, device=dev)
        greedy = torch.tensor(greedy_l, device=dev)
        top_p = torch.tensor([1.0 if g else r.top_p for g, r in zip(greedy_l, reqs)], dtype=torch.float64, device=dev)
        uniforms = torch.zeros(b, max_new, dtype=torch.float64)
        for i, (s, r) in enumerate(zip(seeds, reqs)):
            if not greedy_l[i]:
                uniforms[i, :r.max_new_tokens] = row_uniforms(s, r.max_new_tokens)
        uniforms = uniforms.to(dev)
        any_greedy, any_nucleus = any(greedy_l), bool((top_p < 1.0).any())
        any_temperature = bool((temps != 1.0).any())
        pos = torch.tensor([len(r.prompt_ids) for r in reqs], device=dev)

        tokens: list[list[int]] = [[] for _ in reqs]
        logprobs: list[list[float]] = [[] for _ in reqs]
        finish: list[str] = ["length"] * b
        matched: list[str | None] = [None] * b
        rows = list(range(b))  # request index of each cache row
        live = [True] * b  # per cache row
        n_live = b
        for step in range(max_new):
            tok, lp = sample_tokens(logits, temps, greedy, top_p, uniforms[:, step],
                                    any_greedy=any_greedy, any_nucleus=any_nucleus, any_temperature=any_temperature)
            for row, (t, p) in enumerate(zip(tok.tolist(), lp.tolist())):
                if not live[row]:
                    continue
                i = rows[row]
                tokens[i].append(t)
                logprobs[i].append(p)
                if t in self.stop_ids:
                    finish[i], matched[i] = "stop", self.tokenizer.convert_ids_to_tokens(t)
                elif reqs[i].stop and (hit := self._stop_hit(tokens[i], reqs[i].stop)) is not None:
                    finish[i], matched[i] = "stop", hit
                elif len(tokens[i]) < reqs[i].max_new_tokens:
                    continue
                live[row] = False
                n_live -= 1
            if n_live == 0:
                break
            if 4 * (len(rows) - n_live) >= len(rows):
                keep = [row for row in range(len(rows)) if live[row]]
                sel = torch.tensor(keep, device=dev)
                cache.keep(sel)
                if index is not None:
                    index, used = index.keep(keep)
                    trunk.keep(used)
                tok, pos, temps, greedy, top_p, uniforms = (
                    t.index_select(0, sel) for t in (tok, pos, temps, greedy, top_p, uniforms))
                rows, live = [rows[row] for row in keep], [True] * len(keep)
            logits = (kern.decode(cache, tok, pos, width + step) if index is None
                      else kern.decode_shared(trunk, cache, index, tok, pos, step))
            pos = pos + 1
        return [self._result(tokens[i], logprobs[i], finish[i], matched[i], seeds[i], len(reqs[i].prompt_ids))
                for i in range(b)]

    def _prefill_rows(self, reqs: list[GenRequest], width: int, max_new: int):
        """The call's caches, each distinct prompt prefilled once, and the logits (rows, V) of each row's first
        token: (cache, trunk, index, logits). With `share_prompts` and a repeated prompt, the trunk cache holds
        each prompt once and the rows' cache only their new tokens (trunk and index for `decode_shared`); else
        (trunk and index None) every row holds its own copy of its prompt, copied from its first row."""
        kern, dev, b = self.kernel, self.device, len(reqs)
        first: dict[tuple[int, ...], int] = {}
        group = [first.setdefault(tuple(r.prompt_ids), len(first)) for r in reqs]
        prompts = [list(p) for p in first]
        if self.share_prompts and len(prompts) < b:
            index, prompt_of = TrunkIndex.balanced(group, len(prompts), dev)
            trunk = KVCache(kern.n_layers, index.n_groups, kern.kvh, kern.hd, width, kern.dtype, dev)
            cache = KVCache(kern.n_layers, b, kern.kvh, kern.hd, max_new, kern.dtype, dev)
            home = [prompt_of.index(p) for p in range(len(prompts))]  # each prompt's first trunk row
            logits = self._prefill(trunk, prompts, home, width)
            extra = [r for r, p in enumerate(prompt_of) if home[p] != r]
            if extra:  # a prompt's further trunk rows: copies of its first
                trunk.copy_rows(torch.tensor(extra, device=dev), torch.tensor([home[prompt_of[r]] for r in extra],
                                                                              device=dev))
            return cache, trunk, index, logits.index_select(0, torch.tensor(group, device=dev))
        cache = KVCache(kern.n_layers, b, kern.kvh, kern.hd, width + max_new, kern.dtype, dev)
        rows = [group.index(g) for g in range(len(prompts))]  # each prompt's first row
        logits = self._prefill(cache, prompts, rows, width)
        copies = [i for i in range(b) if rows[group[i]] != i]
        if copies:
            src = [rows[group[i]] for i in copies]
            cache.copy_rows(torch.tensor(copies, device=dev), torch.tensor(src, device=dev))
        return cache, None, None, logits.index_select(0, torch.tensor(group, device=dev))

    def _prefill(self, cache: KVCache, prompts: list[list[int]], rows: list[int], width: int) -> torch.Tensor:
        """Prefill `prompts` into cache rows `rows` in chunks of about `prefill_tokens` prompt tokens; logits
        (prompts, V) at each last token."""
        out, chunk, n_tok = [], [], 0
        for i, prompt in enumerate(prompts):
            chunk.append(i)
            n_tok += len(prompt)
            if n_tok >= self.prefill_tokens or i == len(prompts) - 1:
                out.append(self.kernel.prefill(cache, [rows[j] for j in chunk], [prompts[j] for j in chunk], width))
                chunk, n_tok = [], 0
        return torch.cat(out)

    def _stop_hit(self, ids: list[int], stops: list[str]) -> str | None:
        window = max(len(s.encode("utf-8")) for s in stops) + STOP_WINDOW_SLACK
        tail = self.tokenizer.decode(ids[-window:], skip_special_tokens=False)
        if not any(s and s in tail for s in stops):
            return None
        text = tail if len(ids) <= window else self.tokenizer.decode(ids, skip_special_tokens=False)
        return next((s for s in stops if s and s in text), None)

    def _result(self, ids: list[int], lps: list[float], finish: str, matched: str | None, seed: int,
                prompt_len: int) -> GenResult:
        return build_result(self.tokenizer, self.stop_ids, ids, lps, finish, matched, seed, prompt_len)
