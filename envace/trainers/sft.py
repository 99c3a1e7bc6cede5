"""`envace sft`: supervised cold start on oracle demonstrations of BOTH roles, the way CM2 cold-starts
before RL.

The samples (envace.trainers.sft_samples): every gold assistant message as Act targets and every gold
tool call's true response as Rehearse targets, optionally with wrong-call twins answered by the real world.
Loss only on target tokens (including the end-of-turn
token, so the model learns to stop). Each batch holds one role (Act with probability act_fraction), so
short Rehearse sequences are not padded to long Act ones. Cosine learning rate with warm-up; runs for a step count or a
wall-clock budget. A batch's common prefix runs once and its sequences continue it in length-sorted passes,
the output layer at target positions only (`share_prefix`; the same token-mean loss as one padded
full-logits forward); sequences that go on sharing a longer prefix (a domain's system prompt and tools)
share a trunk of their own (`prefix_groups`). On CPU at more than one torch thread a batch runs in thread
shards (`shards`, envace.thread_shards): the same gradient up to float rounding, each shard in its own
thread at one torch thread. The model's RMSNorms run with a hand-written backward (`fused_norm`,
envace.models.rms_norm; CPU, float32).
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import random
import time
from pathlib import Path

import torch

from envace.cpu_threads import apply_thread_policy
from envace.data.tasks import load_tasks
from envace.engines.logprobs import layer_count
from envace.models.loading import load_policy, pick_device, save_model
from envace.models.rms_norm import use_fused_rms_norm
from envace.thread_shards import (
    ShardedOptimizer,
    ShardRunner,
    add_grads,
    balanced_shards,
    one_torch_thread,
    prefix_shards,
)
from envace.trainers.config import SFTConfig
from envace.trainers.packing import shared_prefix_packs
from envace.trainers.prefix_passes import prefix_pass
from envace.trainers.sft_samples import Sample, TaskSamples, build_samples
from envace.types import Role


def collate(batch: list[Sample], pad_id: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-padded input ids, attention mask and labels (-100 outside targets)."""
    length = max(len(s.ids) for s in batch)
    ids = torch.full((len(batch), length), pad_id, dtype=torch.long)
    att = torch.zeros((len(batch), length), dtype=torch.long)
    labels = torch.full((len(batch), length), -100, dtype=torch.long)
    for i, s in enumerate(batch):
        seq = torch.tensor(s.ids)
        ids[i, : len(s.ids)] = seq
        att[i, : len(s.ids)] = 1
        mask = torch.tensor(s.is_target)
        labels[i, : len(s.ids)] = torch.where(mask, seq, torch.full_like(seq, -100))
    return ids, att, labels


class BatchDrawer:
    """One role per batch (Act with probability `act_fraction`): the two roles' sequences differ in
    length, and a mixed batch pads the short ones to the long ones. Samples are drawn uniformly with
    replacement; with `length_groups` = G > 1 a role's next G batches are drawn at once, sorted by length,
    cut into G batches and handed out in random order (every sample is still a uniform draw, and the
    expected gradient of a group of steps is unchanged; only which samples share a step differs)."""

    def __init__(self, acts: list[Sample], rehs: list[Sample], cfg: SFTConfig, rng: random.Random) -> None:
        self.acts, self.rehs, self.cfg, self.rng = acts, rehs, cfg, rng
        self.queued: dict[Role, list[list[Sample]]] = {Role.ACT: [], Role.REHEARSE: []}

    def __call__(self) -> list[Sample]:
        cfg, rng = self.cfg, self.rng
        role = Role.ACT if (not self.rehs or (self.acts and rng.random() < cfg.act_fraction)) else Role.REHEARSE
        pool = self.acts if role is Role.ACT else self.rehs
        if cfg.length_groups == 1:
            return [rng.choice(pool) for _ in range(cfg.batch_size)]
        queue = self.queued[role]
        if not queue:
            drawn = sorted((rng.choice(pool) for _ in range(cfg.batch_size * cfg.length_groups)),
                           key=lambda s: len(s.ids))
            queue.extend(drawn[i:i + cfg.batch_size] for i in range(0, len(drawn), cfg.batch_size))
            rng.shuffle(queue)
        return queue.pop()


def batch_loss(model, batch: list[Sample], pad_id: int, share_prefix: bool,
               prefix_groups: bool = True) -> tuple[torch.Tensor, list[float]]:
    """Token-mean cross-entropy over the batch's target tokens, and each sample's own mean (for logging).

    share_prefix: the batch's common prefix runs once and the sequences continue it in length-sorted passes,
    the output layer only at target positions (`envace.trainers.packing.prefix_pass`); otherwise one padded
    forward with full logits. Both compute the same loss. prefix_groups: longer prefixes shared by part of
    the batch get trunks of their own (`shared_prefix_packs`)."""
    if not share_prefix:
        ids, att, labels = (t.to(next(model.parameters()).device) for t in collate(batch, pad_id))
        logits = model(input_ids=ids, attention_mask=att).logits[:, :-1]
        tgt = labels[:, 1:]
        per_tok = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), tgt.reshape(-1),
                                                    ignore_index=-100, reduction="none").view(tgt.shape)
        mask = (tgt != -100).float()
        with torch.no_grad():
            row_loss = ((per_tok * mask).sum(1) / mask.sum(1).clamp(min=1)).tolist()
        return (per_tok * mask).sum() / mask.sum().clamp(min=1), row_loss
    reads = [[j - 1 for j, t in enumerate(s.is_target) if t] for s in batch]
    packs = shared_prefix_packs([s.ids for s in batch], reads, batch[0].role, layer_count(model), prefix_groups)
    rows = [seg.row for p in packs for seg in p.segments]
    targets = [batch[seg.row].ids[t + 1] for p in packs for seg in p.segments for t in reads[seg.row]]
    nll = -prefix_pass(model, packs, targets, [1.0] * len(targets), pad_id)[0]
    with torch.no_grad():
        per_row = torch.split(nll.detach(), [len(reads[r]) for r in rows])
        by_row = {r: float(x.mean()) if x.numel() else 0.0 for r, x in zip(rows, per_row)}
    return nll.sum() / max(len(targets), 1), [by_row[i] for i in range(len(batch))]


def loss_tokens(sample: Sample) -> int:
    """The sample's positions that carry loss (a target at position 0 has no prediction)."""
    return sum(sample.is_target[1:])


def shard_grads(model, batch: list[Sample], pad_id: int, share_prefix: bool, runner: ShardRunner,
                prefix_groups: bool = True) -> tuple[torch.Tensor, list[float], list[tuple]]:
    """`batch_loss` + its gradients with the batch cut into `runner.n_threads` shards of similar work (with
    `share_prefix` and `prefix_groups`, sequences that share a prefix in one shard: `prefix_shards`), each in
    its own thread, each shard's token-mean loss weighted by its share of the batch's loss tokens. Returns
    the batch loss, each sample's own mean, and each shard's gradients w.r.t. the trainable parameters (in
    shard order; nothing is written to `.grad`)."""
    total = max(sum(loss_tokens(s) for s in batch), 1)
    row_loss = [0.0] * len(batch)

    def shard_loss(idx: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        loss, rows = batch_loss(model, [batch[i] for i in idx], pad_id, share_prefix, prefix_groups)
        for i, r in zip(idx, rows):
            row_loss[i] = r
        scaled = loss * (sum(loss_tokens(batch[i]) for i in idx) / total)
        return scaled, scaled.detach()

    if share_prefix and prefix_groups:  # a shard runs its sequences' shared prefixes once: keep them together
        parts = prefix_shards([s.ids for s in batch], runner.n_threads)
    else:
        parts = balanced_shards([len(s.ids) for s in batch], runner.n_threads)
    params = [p for p in model.parameters() if p.requires_grad]
    results = runner.grads(params, [functools.partial(shard_loss, idx) for idx in parts])
    losses = [loss for loss, _ in results]
    return sum(losses[1:], losses[0]), row_loss, [grads for _, grads in results]


def sharded_batch_grads(model, batch: list[Sample], pad_id: int, share_prefix: bool, runner: ShardRunner,
                        prefix_groups: bool = True) -> tuple[torch.Tensor, list[float]]:
    """`shard_grads` with the parameters' `.grad` set to the batch's gradient (the shards' sum in shard
    order). Returns the batch loss and each sample's own mean."""
    loss, row_loss, grads = shard_grads(model, batch, pad_id, share_prefix, runner, prefix_groups)
    model.zero_grad(set_to_none=True)
    params = [p for p in model.parameters() if p.requires_grad]
    for shard in grads:  # in shard order
        add_grads(params, shard)
    return loss, row_loss


def lr_at(step: int, total: int, cfg: SFTConfig) -> float:
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    frac = min(1.0, (step - cfg.warmup_steps) / max(1, total - cfg.warmup_steps))
    return cfg.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))


def sft(cfg: SFTConfig, per_task: TaskSamples | None = None) -> dict:
    """Train and save `<out_dir>/model`. Returns a summary (steps, samples, final losses, wall time).
    `per_task`: builds the tasks' samples in place of `task_samples` (the same samples, another way)."""
    plan = apply_thread_policy(cfg.threads)
    torch.manual_seed(cfg.seed)
    rng = random.Random(cfg.seed)
    device = torch.device(cfg.device) if cfg.device else pick_device()
    tasks = load_tasks(cfg.data)  # before the model: a bad data file fails in a second, not after a load
    model, tok = load_policy(cfg.model, device=device)
    if cfg.fused_norm:
        use_fused_rms_norm(model)  # the same norms, a shorter backward (CPU, float32; no-op elsewhere)
    acts, rehs = build_samples(tasks, tok, cfg, per_task)
    if not acts and not rehs:
        raise ValueError(f"no SFT samples fit max_len={cfg.max_len}; raise max_len or check the data")
    out = Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    cfg.save_resolved(out)
    draw = BatchDrawer(acts, rehs, cfg, rng)
    t0 = time.perf_counter()
    losses: dict[str, list[float]] = {"act": [], "rehearse": []}
    model.train()
    # on CPU, one shard per torch thread by default: each shard in its own thread at one torch thread
    n_shards = 1 if device.type != "cpu" else min(cfg.shards or plan.threads, cfg.batch_size)
    with contextlib.ExitStack() as stack:
        runner = stack.enter_context(ShardRunner(n_shards)) if n_shards > 1 else None
        if runner is not None:
            stack.enter_context(one_torch_thread())
        params = [p for p in model.parameters() if p.requires_grad]
        adamw = functools.partial(torch.optim.AdamW, lr=cfg.lr, weight_decay=cfg.weight_decay)
        # with shards the optimizer step runs in the shard threads too from 2 M parameters (the same update bit for bit)
        opt = adamw(params) if runner is None else ShardedOptimizer(params, runner, adamw)
        step = _sft_loop(cfg, model, tok, opt, draw, losses, t0, runner)
    save_model(model, tok, out / "model")  # quiet, umask file modes
    tail = lambda xs: sum(xs[-200:]) / max(1, len(xs[-200:]))  # noqa: E731
    summary = {"steps": step, "act_samples": len(acts), "rehearse_samples": len(rehs),
               "act_loss": tail(losses["act"]), "rehearse_loss": tail(losses["rehearse"]),
               "shards": n_shards, "wall_s": time.perf_counter() - t0, "model_dir": str(out / "model")}
    (out / "sft_summary.json").write_text(json.dumps(summary, indent=2))
    return summary


def _sft_loop(cfg: SFTConfig, model, tok, opt, draw: BatchDrawer, losses: dict[str, list[float]], t0: float,
              runner: ShardRunner | None) -> int:
    """The optimizer steps; returns the step count. With a time budget the schedule length is estimated
    from the first 20 steps' speed."""
    from tqdm.auto import tqdm

    total = cfg.steps or 10_000
    step = 0
    bar = tqdm(total=cfg.steps, desc="sft", unit="step", disable=not cfg.progress)
    while True:
        elapsed = time.perf_counter() - t0
        if cfg.steps is not None and step >= cfg.steps:
            break
        if cfg.steps is None:
            if elapsed >= cfg.time_budget_s:
                break
            if step == 20:
                total = max(cfg.warmup_steps + 1, int(cfg.time_budget_s / (elapsed / 20)))
        batch = draw()
        for g in opt.param_groups:
            g["lr"] = lr_at(step, total, cfg)
        if runner is None:
            loss, row_loss = batch_loss(model, batch, tok.pad_token_id, cfg.share_prefix, cfg.prefix_groups)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
        else:
            loss, row_loss, grads = shard_grads(model, batch, tok.pad_token_id, cfg.share_prefix, runner,
                                                cfg.prefix_groups)
            opt.step(grads, 1.0)
        for s, row_l in zip(batch, row_loss):
            losses[s.role.value].append(row_l)
        step += 1
        bar.update(1)
        if step % 25 == 0:
            bar.set_postfix(loss=f"{loss.item():.3f}")
    bar.close()
    return step
