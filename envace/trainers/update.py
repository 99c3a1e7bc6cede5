"""The policy update of one rollout batch: PPO epochs x mini-batches, each an optimizer step over
gradient-accumulated micro-batches of packed sequences.

Rows are packed (`envace.trainers.packing`, `algo.pack`: the rows of a task's K trajectories share their
common prefix through the KV cache or one prefix tree, or a trajectory's calls whose prompts extend each
other share one sequence), packs are
sorted by length into token-capped micro-batches of one role, and only response positions go through
the output layer. Per epoch (`algo.ppo_epochs`) the packs are shuffled (seeded) and split into
`algo.ppo_mini_batches` mini-batches of about equal loss tokens; each mini-batch is one optimizer step. With
1 epoch x 1 mini-batch this is one on-policy step per rollout batch, as in the paper.

Log-probs are recomputed at the temperature each row was sampled with; the old log-probs are the sampling
engine's own (equal to the recomputation up to float error, so the ratio of the first mini-batch of the
first epoch is 1 and later ones move as the policy does). Token-mean aggregation is global over the whole
mini-batch, not per micro-batch: each micro-batch's mean is rescaled by its share of the mini-batch's
tokens (rows for the seq-mean modes), so the result depends neither on the micro-batch size nor on the
packing. Rows without a score (NaN reward: a judge error) are left out before packing, so neither their
tokens nor their rows count in any aggregation's denominator (KL and entropy terms included); so are Rehearse
rows at `algo.rehearse_loss_weight` 0, and another weight w counts each Rehearse token (row) w times in the
loss and in its denominator (envace.trainers.micro_loss). Per-role
metrics are the loss function's own (approx KL, ratio mean, clip and dual-clip fractions), token-weighted
over all optimizer steps, plus entropy, reference KL, and the gradient noise scale
(`envace.trainers.noise_scale`, first epoch: the on-policy gradient; the step then runs a random half
of its prompts' micro-batches before the other half).

Extra rows (`extra`: `ExtraRows` sets an arm adds, e.g. the echo arm's real answers as Rehearse targets,
envace.trainers.arms.echo) are separate sets of supervised rows, not policy-gradient rows. Each set is packed on
its own, cut into as many chunks as there are policy mini-batches (chunk i joins optimizer step i; an order
shuffled by the set's own seeded stream when there are several mini-batches, so the policy rows' order is
unchanged), and each optimizer step adds the set's `coef` x the token-mean NLL (temperature 1) over its chunk's
tokens to the policy loss. They appear in no policy-loss denominator, role metric or noise-scale estimate; with
per-role clipping a set's gradient is part of its role's. A set with `coef` 0 (or no rows) runs none of this.

A micro-batch's loss is envace.trainers.micro_loss. On CPU at more than one torch thread (`shards`, default
one per thread) an optimizer step's micro-batches run that many at a time in thread shards
(envace.thread_shards), each forward and backward in its own thread at one torch thread; their gradients
are added in micro-batch order, so every reading above (the running gradient sums of per-role clipping and
noise tracking included) is the one-at-a-time step's.
"""

from __future__ import annotations

import contextlib
import functools
import math
import random
from collections import defaultdict
from dataclasses import dataclass, field

import torch

from envace.engines.logprobs import layer_count, prefix_supported
from envace.thread_shards import ShardRunner, add_grads
from envace.trainers.config import AlgoConfig
from envace.trainers.micro_loss import MicroBatchLoss, weighted_count
from envace.trainers.noise_scale import NoiseAccumulator, split_half
from envace.trainers.packed_readout import packed_logprobs, tree_mask_kind
from envace.trainers.packing import Pack, PackMode, micro_batches, pack_rows, padded_tokens
from envace.trainers.train_rows import ExtraRows, TrainRow
from envace.types import Role

LOSS_METRICS = ("clip_frac", "dual_clip_frac", "approx_kl", "ratio_mean")


@dataclass
class StepStats:
    """One optimizer step (one mini-batch of one epoch)."""

    epoch: int
    mini_batch: int
    loss: float
    grad_norm: float
    rows: int
    tokens: int
    metrics: dict[str, float]  # the loss function's metrics, token-weighted over the mini-batch
    extra: dict[str, tuple[float, int]] = field(default_factory=dict)  # set name -> (token-mean NLL, tokens)


@dataclass
class UpdateResult:
    loss: float       # mean over optimizer steps
    grad_norm: float  # mean pre-clip norm over optimizer steps
    role_metrics: dict[str, dict[str, float]]
    metrics: dict[str, float] = field(default_factory=dict)
    steps: list[StepStats] = field(default_factory=list)


def split_mini_batches(packs: list[Pack], n: int) -> list[list[Pack]]:
    """`packs` cut in order into min(n, len(packs)) non-empty chunks of about equal loss tokens."""
    n = min(n, len(packs))
    total = sum(p.loss_tokens for p in packs)
    chunks: list[list[Pack]] = []
    cur: list[Pack] = []
    acc = 0
    for i, p in enumerate(packs):
        cur.append(p)
        acc += p.loss_tokens
        chunks_left = n - len(chunks) - 1
        packs_left = len(packs) - i - 1
        if chunks_left > 0 and (acc >= total * (len(chunks) + 1) / n or packs_left == chunks_left):
            chunks.append(cur)
            cur = []
    chunks.append(cur)
    return chunks


def _flat_grad(params: list[torch.nn.Parameter]) -> torch.Tensor:
    return torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1) for p in params])


class _Updater:
    def __init__(self, model, optimizer, rows, algo: AlgoConfig, pad_id, micro_batch, max_tokens, grad_clip, ref,
                 full_logits, seed: int = 0, clip_per_role: bool = False, runner: ShardRunner | None = None):
        self.model, self.optimizer, self.rows, self.algo = model, optimizer, rows, algo
        self.runner = runner
        self.pad_id, self.micro_batch, self.max_tokens, self.grad_clip, self.ref = (pad_id, micro_batch, max_tokens,
                                                                                    grad_clip, ref)
        self.full_logits = full_logits
        self.clip_per_role = clip_per_role
        self.role_grad_norms: dict[str, list[float]] = defaultdict(list)
        self.micro_loss = MicroBatchLoss(model, rows, algo, pad_id, max_tokens, full_logits, ref)
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.sums: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        self.noise = NoiseAccumulator()
        self.role_noise: dict[str, NoiseAccumulator] = defaultdict(NoiseAccumulator)
        self.forward_tokens = 0
        self.half_rng = random.Random(f"{seed}|noise-halves")  # its own stream: mini-batch order is unchanged

    def _halves(self, packs: list[Pack]) -> list[list[Pack]] | None:
        """The packs split by a random half of their prompts (noise-scale tracking), or None with < 2 prompts."""
        prompts = sorted({self.rows[p.segments[0].row].prompt_index for p in packs})
        if len(prompts) < 2:
            return None
        self.half_rng.shuffle(prompts)
        first = set(prompts[: len(prompts) // 2])
        return [[p for p in packs if (self.rows[p.segments[0].row].prompt_index in first) == (h == 0)]
                for h in (0, 1)]

    def step(self, packs: list[Pack], epoch: int, index: int,
             extra: list[tuple[ExtraRows, list[Pack]]] | None = None) -> StepStats:
        algo = self.algo
        self.optimizer.zero_grad(set_to_none=True)
        halves = self._halves(packs) if algo.grad_noise_scale and epoch == 0 else None
        track = halves is not None
        # tracking: half A's micro-batches, then half B's (the same loss: token shares are global)
        mbs = ([(h, mb) for h, half in enumerate(halves)
                for mb in micro_batches(half, self.micro_batch, self.max_tokens)]
               if track else [(0, mb) for mb in micro_batches(packs, self.micro_batch, self.max_tokens)])
        n_rows = sum(len(p.segments) for p in packs)
        n_tok = sum(p.loss_tokens for p in packs)
        den_tok, den_rows = weighted_count(algo, packs)  # the loss's denominators (Rehearse rows weighted)
        prev = None
        half_grad: dict[tuple[str, int], torch.Tensor] = {}  # (role or "all", half) -> summed share-weighted grad
        half_share: dict[tuple[str, int], float] = defaultdict(float)
        half_prompts: dict[tuple[str, int], set[int]] = defaultdict(set)
        role_grad: dict[str, torch.Tensor] = {}  # clip_per_role: each role's summed gradient
        total_loss = 0.0
        step_sums: dict[str, float] = defaultdict(float)
        if epoch == 0:
            self.forward_tokens += sum(padded_tokens(mb, self.max_tokens) for _, mb in mbs)
        for half, out in self._run_micro_batches(mbs, den_tok, den_rows):
            total_loss += out.loss * out.share
            role, tokens = out.role, out.tokens
            s = self.sums[role]
            for k in LOSS_METRICS:
                s[k] += out.lm[k] * tokens
                step_sums[k] += out.lm[k] * tokens
            s["weight"] += tokens
            if epoch == 0:
                s["tokens"] += tokens
            s["entropy"] += out.entropy
            s["logprob"] += out.logprob
            if out.kl is not None:
                s["kl"] += out.kl
            if track or self.clip_per_role:
                flat = _flat_grad(self.params)
                delta = flat if prev is None else flat - prev
                prev = flat
            if self.clip_per_role:
                role_grad[role] = delta if role not in role_grad else role_grad[role] + delta
            if track:
                for key in ((role, half), ("all", half)):
                    half_grad[key] = delta if key not in half_grad else half_grad[key] + delta
                    half_share[key] += out.share
                    half_prompts[key].update(out.prompts)
        extra_stats: dict[str, tuple[float, int]] = {}
        for rows_set, chunk in extra or []:
            tok = sum(p.loss_tokens for p in chunk)
            if not tok:
                continue
            nll = self._supervised(rows_set, chunk, tok)
            extra_stats[rows_set.name] = (nll, tok)
            total_loss += rows_set.coef * nll
            if self.clip_per_role:  # its gradient counts as its role's (echo: a Rehearse target)
                flat = _flat_grad(self.params)
                delta = flat if prev is None else flat - prev
                prev = flat
                key = rows_set.role.value
                role_grad[key] = delta if key not in role_grad else role_grad[key] + delta
        if self.clip_per_role:
            grad_norm = self._clip_roles(role_grad)
        else:
            grad_norm = float(torch.nn.utils.clip_grad_norm_(self.params, self.grad_clip))
        if track:
            for role in {k[0] for k in half_grad}:
                if (role, 0) in half_grad and (role, 1) in half_grad:
                    est = split_half(half_grad[role, 0] / half_share[role, 0], half_grad[role, 1] / half_share[role, 1],
                                     len(half_prompts[role, 0]), len(half_prompts[role, 1]))
                    (self.noise if role == "all" else self.role_noise[role]).add(est)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return StepStats(epoch=epoch, mini_batch=index, loss=total_loss, grad_norm=grad_norm, rows=n_rows,
                         tokens=n_tok, metrics={k: v / max(n_tok, 1) for k, v in step_sums.items()},
                         extra=extra_stats)

    def _run_micro_batches(self, mbs: list[tuple[int, list[Pack]]], n_tok: float, n_rows: float):
        """Yield (half, the micro-batch's MicroOut) in order, each micro-batch's gradient already added to
        `.grad` (a reader sees the running sum, as after its own backward). With a shard runner the
        micro-batches run `n_threads` at a time, each forward and backward in its own thread; their
        gradients are added in micro-batch order."""
        width = self.runner.n_threads if self.runner else 1
        for i in range(0, len(mbs), width):
            chunk = mbs[i:i + width]
            if len(chunk) == 1:
                (half, mb), = chunk
                out = self.micro_loss(mb, n_tok, n_rows)
                out.scaled.backward()
                yield half, out
                continue
            closures = [functools.partial(self.micro_loss.with_loss, mb, n_tok, n_rows) for _, mb in chunk]
            for (half, _), (out, grads) in zip(chunk, self.runner.grads(self.params, closures)):
                add_grads(self.params, grads)
                yield half, out

    def _supervised(self, rows_set: ExtraRows, packs: list[Pack], n_tok: int) -> float:
        """Backward of coef x token-mean NLL over `packs` of `rows_set` (accumulated into the step's gradient);
        the NLL."""
        nll = 0.0
        for mb in micro_batches(packs, self.micro_batch, self.max_tokens):
            out = packed_logprobs(self.model, mb, rows_set.rows, self.pad_id, full_logits=self.full_logits,
                                  max_tokens=self.max_tokens)
            part = -(out.logprobs * out.mask.to(out.logprobs.dtype)).sum() / n_tok
            (rows_set.coef * part).backward()
            nll += float(part.item())
        return nll

    def _clip_roles(self, role_grad: dict[str, torch.Tensor]) -> float:
        """Clip each role's gradient to grad_clip on its own and write their sum back; the pre-clip norm of the
        sum is returned (what the global clip would report)."""
        total = torch.zeros_like(next(iter(role_grad.values())))
        for role, g in role_grad.items():
            norm = float(g.norm())
            self.role_grad_norms[role].append(norm)
            total += g * min(1.0, self.grad_clip / (norm + 1e-6))
        pre = float(sum(role_grad.values()).norm())
        offset = 0
        for p in self.params:
            n = p.numel()
            p.grad = total[offset: offset + n].view_as(p).clone()
            offset += n
        return pre

    def role_metrics(self) -> dict[str, dict[str, float]]:
        out: dict[str, dict[str, float]] = {}
        for role, s in self.sums.items():
            w = max(s["weight"], 1.0)
            vals = {"tokens": s["tokens"], "entropy": s["entropy"] / w, "logprob_mean": s["logprob"] / w}
            vals.update({k: s[k] / w for k in LOSS_METRICS})
            if self.ref is not None:
                vals["kl"] = s["kl"] / w
            vals.update(self.role_noise[role].summary() if role in self.role_noise else {})
            if self.role_grad_norms.get(role):
                vals["grad_norm"] = sum(self.role_grad_norms[role]) / len(self.role_grad_norms[role])
            out[role] = vals
        return out


def _reference_logprobs(ref_model, packs: list[Pack], rows: list[TrainRow], pad_id: int, micro_batch: int,
                        max_tokens: int | None, full_logits: bool) -> dict[int, torch.Tensor]:
    """Each row's response log-probs under the frozen reference, through the same packed path."""
    ref: dict[int, torch.Tensor] = {}
    with torch.no_grad():
        for mb in micro_batches(packs, micro_batch, max_tokens):
            out = packed_logprobs(ref_model, mb, rows, pad_id, full_logits=full_logits, max_tokens=max_tokens)
            for i, r in enumerate(out.rows):
                ref[r] = out.logprobs[i, : len(rows[r].response_ids)]
    return ref


def policy_update(model: torch.nn.Module, optimizer: torch.optim.Optimizer, rows: list[TrainRow],
                  algo: AlgoConfig, *, pad_id: int, micro_batch: int, grad_clip: float,
                  ref_model: torch.nn.Module | None = None, seed: int = 0, max_tokens: int | None = None,
                  full_logits: bool = False, clip_per_role: bool = False, extra: list[ExtraRows] | None = None,
                  shards: int | None = None) -> UpdateResult:
    """`algo.ppo_epochs` x `algo.ppo_mini_batches` optimizer steps on `rows` (a forward takes at most
    `micro_batch` sequences and `max_tokens` padded tokens). `seed` orders the mini-batches; `full_logits`
    forces the reference full-vocabulary head. Rows whose reward is NaN (unscored) are not trained on, nor Rehearse
    rows at `algo.rehearse_loss_weight` 0 (another weight scales their loss and their share of the denominator).
    `clip_per_role`: each role's gradient is clipped to `grad_clip` on its own before they are added.
    `extra`: supervised row sets, each adding its `coef` x its token-mean NLL (module docstring; a set with coef 0
    or no rows is skipped).
    `shards`: micro-batches run this many at a time in thread shards (CPU only; None: one per torch thread)."""
    model.train()
    rows = [r for r in rows if not math.isnan(r.reward)]  # unscored: out of every denominator
    if algo.rehearse_loss_weight == 0:  # weight 0: out of the update altogether, metrics included
        rows = [r for r in rows if r.role is not Role.REHEARSE]
    mode = PackMode(algo.pack)
    if mode in (PackMode.PREFIX, PackMode.AUTO) and (prefix_supported(model) is not None
                                    or (ref_model is not None and prefix_supported(ref_model) is not None)):
        mode = PackMode.TREE  # no KV cache, or a sliding-window layer
    if mode is PackMode.TREE and tree_mask_kind(model) is None:
        mode = PackMode.CHAIN  # the attention implementation takes no explicit mask
    layers = layer_count(model)  # a prefix pack's trunk may end before its first read (packing._trunk_end)
    packs = pack_rows(rows, mode, layers)
    sets = [ExtraRows(s.name, list(s.rows), s.coef, s.role) for s in extra or [] if s.coef > 0 and s.rows]
    if len({s.name for s in sets}) != len(sets):
        raise ValueError(f"extra row sets share a name ({[s.name for s in sets]}); give each set its own name")
    extra_packs = [(s, pack_rows(s.rows, mode, layers)) for s in sets]
    if not packs and not extra_packs:
        return UpdateResult(loss=0.0, grad_norm=0.0, role_metrics={}, metrics={"optimizer_steps": 0.0})
    ref = None
    if algo.use_kl and ref_model is not None:
        ref = _reference_logprobs(ref_model, packs, rows, pad_id, micro_batch, max_tokens, full_logits)
    device = next(model.parameters()).device
    n_shards = 1 if device.type != "cpu" else (shards or torch.get_num_threads())
    with contextlib.ExitStack() as stack:
        runner = stack.enter_context(ShardRunner(n_shards)) if n_shards > 1 else None
        upd = _Updater(model, optimizer, rows, algo, pad_id, micro_batch, max_tokens, grad_clip, ref, full_logits,
                       seed, clip_per_role, runner)
        steps = _optimizer_steps(upd, packs, extra_packs, algo, seed)
    n_rows = sum(len(p.segments) for p in packs)
    metrics = {"optimizer_steps": float(len(steps)), "forward_tokens": float(upd.forward_tokens),
               "loss_tokens": float(sum(p.loss_tokens for p in packs)),
               "packed_rows_per_seq": n_rows / len(packs) if packs else 0.0, **upd.noise.summary()}
    for rows_set in sets:  # first epoch: the NLL before the update moved the model
        seen = [s.extra[rows_set.name] for s in steps if rows_set.name in s.extra and s.epoch == 0]
        if seen:
            tok = sum(t for _, t in seen)
            metrics[f"{rows_set.name}_nll"] = sum(nll * t for nll, t in seen) / tok
            metrics[f"{rows_set.name}_tokens"] = float(tok)
            metrics[f"{rows_set.name}_rows"] = float(len(rows_set.rows))
    return UpdateResult(loss=sum(s.loss for s in steps) / len(steps),
                        grad_norm=sum(s.grad_norm for s in steps) / len(steps),
                        role_metrics=upd.role_metrics(), metrics=metrics, steps=steps)


def _optimizer_steps(upd: _Updater, packs: list[Pack], extra_packs: list[tuple[ExtraRows, list[Pack]]],
                     algo: AlgoConfig, seed: int) -> list[StepStats]:
    """Epochs x mini-batches: one `_Updater.step` each, mini-batch order seeded."""
    rng = random.Random(seed)
    # each extra set's own stream: the policy rows' mini-batch order is unchanged
    extra_rngs = [random.Random(f"{seed}|{s.name}") for s, _ in extra_packs]
    steps: list[StepStats] = []
    for epoch in range(algo.ppo_epochs):
        order = list(packs)
        if algo.ppo_mini_batches > 1:
            rng.shuffle(order)
        minis = split_mini_batches(order, algo.ppo_mini_batches) if order else [[]]
        chunked = []
        for (rows_set, set_packs), set_rng in zip(extra_packs, extra_rngs):
            order_x = list(set_packs)
            if order_x and len(minis) > 1:
                set_rng.shuffle(order_x)
            chunked.append((rows_set, split_mini_batches(order_x, len(minis)) if order_x else []))
        for index, mini in enumerate(minis):
            steps.append(upd.step(mini, epoch, index, [(rs, chunks[index]) for rs, chunks in chunked
                                                       if index < len(chunks)]))
    return steps


def role_rows(rows: list[TrainRow], role: Role) -> list[TrainRow]:
    return [r for r in rows if r.role == role]
