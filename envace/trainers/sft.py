"""`envace sft`: supervised cold start on oracle demonstrations of BOTH roles, the way CM2 cold-starts
before RL.

Act samples: every assistant message of a task's gold conversation, prompted with the chat template and
the task's tools exactly as the rollout prompts Act; by default all of a task's Act targets are packed
into one sequence (the whole conversation, loss on every assistant message), which gives each target
the same context at a fraction of the tokens. Rehearse samples: every gold tool call, prompted
with the Rehearse simulator chat exactly as the rollout prompts it, with the environment's TRUE response
wrapped as `<execution_result>` as the target. With `error_demos` > 0 a share of the gold calls of tool-world
tasks also get a wrong twin (`wrong_call`: an id the world does not know, or an amount a thousand times the
gold one), still a well-formed call, answered by the REAL world from the state the gold calls before it
left (`error_rehearse_samples`), so the rehearsed world learns to say no where the real one does: the gold
conversations themselves hold no tool errors. Loss only on target tokens (including the end-of-turn
token, so the model learns to stop). Each batch holds one role (Act with probability act_fraction), so
short Rehearse sequences are not padded to long Act ones. Cosine learning rate with warm-up; runs for a step count or a
wall-clock budget. A batch's common prefix (the system prompt and tools its samples share) runs once and
its sequences continue it in length-sorted passes, the output layer at target positions only
(`share_prefix`; the same token-mean loss as one padded full-logits forward). On CPU at more than one
torch thread a batch runs in thread shards (`shards`, envace.thread_shards): the same gradient
up to float rounding, each shard in its own thread at one torch thread.
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import random
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from envace.chat_tokens import encode_target
from envace.cpu_threads import apply_thread_policy
from envace.data.tasks import load_tasks
from envace.models.loading import load_policy, pick_device, save_model
from envace.roles.act import act_prompt_ids
from envace.roles.rehearse import rehearse_messages, rehearse_prompt_ids, render_execution_result
from envace.thread_shards import ShardRunner, add_grads, balanced_shards, one_torch_thread
from envace.trainers.config import SFTConfig
from envace.trainers.packing import shared_prefix_packs
from envace.trainers.prefix_passes import prefix_pass
from envace.types import Message, Role, Task, ToolCall

END = "<|im_end|>"


@dataclass
class Sample:
    """One training sequence: token ids and, per position, whether it is a target (carries loss)."""

    role: Role
    ids: list[int]
    is_target: list[bool]

    @classmethod
    def of(cls, role: Role, prompt_ids: list[int], target_ids: list[int]) -> Sample:
        return cls(role, prompt_ids + target_ids, [False] * len(prompt_ids) + [True] * len(target_ids))

    @property
    def n_target(self) -> int:
        return sum(self.is_target)


def _chat_text(tokenizer, messages: list[Message], tools, add_generation_prompt: bool) -> str:
    return tokenizer.apply_chat_template([m.to_openai() for m in messages], tools=tools,
                                         add_generation_prompt=add_generation_prompt, tokenize=False)


def _act_targets(task: Task, tokenizer) -> list[tuple[int, str, str]]:
    """(message index, prompt text, target text) for every assistant message of the gold conversation.
    The target runs to the end-of-turn token inclusive, so the model learns to stop."""
    out = []
    msgs = task.messages
    for i, m in enumerate(msgs):
        if m.role != "assistant":
            continue
        prompt_text = _chat_text(tokenizer, msgs[:i], task.tools, True)
        full_text = _chat_text(tokenizer, msgs[: i + 1], task.tools, False)
        if not full_text.startswith(prompt_text):
            raise ValueError(f"chat template of {tokenizer.name_or_path!r} does not render prompts as prefixes "
                             f"of the conversation (task {task.uuid}, message {i}); SFT targets need that")
        target = full_text[len(prompt_text):]
        target = target[: target.index(END) + len(END)] if END in target else target + (tokenizer.eos_token or "")
        out.append((i, prompt_text, target))
    return out


def act_samples(task: Task, tokenizer) -> list[Sample]:
    """One sample per assistant message: the Act prompt exactly as the rollout builds it, then the
    gold message. The reference form that `packed_act_sample` must reproduce."""
    return [Sample.of(Role.ACT, act_prompt_ids(tokenizer, task.messages[:i], task.tools),
                      encode_target(tokenizer, target))
            for i, _, target in _act_targets(task, tokenizer)]


def packed_act_sample(task: Task, tokenizer) -> Sample | None:
    """All Act targets of a task in ONE sequence: the whole gold conversation with loss on every
    assistant message. Each target token sees exactly the context its per-message sample gives it
    (causal attention; every prompt is a prefix of the conversation), at ~1/n of the tokens for n
    assistant messages. None when a later prompt is not a prefix of the rendered conversation (e.g. a
    template that rewrites earlier turns) or the pieces tokenize differently from the whole prompt;
    callers then fall back to `act_samples`."""
    targets = _act_targets(task, tokenizer)
    if not targets:
        return None
    ids: list[int] = []
    is_target: list[bool] = []
    text = ""
    for i, prompt_text, target in targets:
        if not prompt_text.startswith(text):
            return None
        ctx = tokenizer.encode(prompt_text[len(text):], add_special_tokens=False)
        ids += ctx
        is_target += [False] * len(ctx)
        if ids != act_prompt_ids(tokenizer, task.messages[:i], task.tools):
            return None
        tgt = encode_target(tokenizer, target)
        ids += tgt
        is_target += [True] * len(tgt)
        text = prompt_text + target
    return Sample(Role.ACT, ids, is_target)


def rehearse_samples(task: Task, tokenizer, *, few_shot: bool, style: str) -> list[Sample]:
    out = []
    msgs = task.messages
    for i, m in enumerate(msgs):
        if m.role != "assistant" or not m.tool_calls:
            continue
        responses = [r for r in msgs[i + 1: i + 1 + len(m.tool_calls)] if r.role == "tool"]
        act_text = _chat_text(tokenizer, msgs[: i + 1], task.tools, False)[
            len(_chat_text(tokenizer, msgs[:i], task.tools, True)):].split(END)[0]
        for call, resp in zip(m.tool_calls, responses):
            try:
                obj = json.loads(resp.content)
            except json.JSONDecodeError:
                continue
            chat = rehearse_messages(task, msgs[:i], act_text, call, few_shot=few_shot, style=style)
            target = render_execution_result(obj) + END
            out.append(Sample.of(Role.REHEARSE, rehearse_prompt_ids(tokenizer, chat),
                                 encode_target(tokenizer, target)))
    return out


def wrong_call(call: ToolCall, rng: random.Random) -> ToolCall | None:
    """A wrong twin of a gold call: a string argument replaced by an unknown id, or a number scaled by 1000
    (infeasible amounts); None when the call has neither."""
    strings = [k for k, v in call.arguments.items() if isinstance(v, str)]
    numbers = [k for k, v in call.arguments.items() if isinstance(v, (int, float)) and not isinstance(v, bool)]
    choices = [("id", k) for k in strings] + [("amount", k) for k in numbers]
    if not choices:
        return None
    kind, key = rng.choice(choices)
    value = f"zz-{rng.randrange(10**6):06d}" if kind == "id" else call.arguments[key] * 1000
    return ToolCall(call.name, {**call.arguments, key: value})


def error_rehearse_samples(task: Task, tokenizer, *, share: float, seed: int, few_shot: bool,
                           style: str) -> tuple[list[Sample], int]:
    """Rehearse samples for wrong twins of a `share` of the task's gold calls, each answered by the real
    world (replaying the gold calls before it); returns the samples and how many answers are errors. A
    twin that the Act parser would reject (it breaks the schema) is never rehearsed in a rollout: skipped."""
    from envace.execution_result import is_error_value
    from envace.roles.act import parse_act
    from envace.rollout.machine import _execute
    from envace.toolcall import render_tool_call
    from envace.worlds.environment import WorldEnvironment

    if share <= 0 or task.initial_state is None:
        return [], 0
    rng = random.Random(f"{seed}|error-demos|{task.uuid}")
    out, n_errors, done = [], 0, []
    msgs = task.messages
    for i, m in enumerate(msgs):
        if m.role != "assistant" or not m.tool_calls:
            continue
        for j, call in enumerate(m.tool_calls):
            twin = wrong_call(call, rng) if rng.random() < share else None
            calls = [*m.tool_calls[:j], twin, *m.tool_calls[j + 1:]] if twin is not None else []
            act_text = "\n".join(render_tool_call(c) for c in calls)
            if twin is not None and not parse_act(act_text, task.tools).error:
                env = WorldEnvironment()
                env.reset(task)
                for c in [*done, *m.tool_calls[:j]]:
                    _execute(env, c)
                value = _execute(env, twin).agent_value()
                n_errors += is_error_value(value)
                chat = rehearse_messages(task, msgs[:i], act_text, twin, few_shot=few_shot, style=style)
                out.append(Sample.of(Role.REHEARSE, rehearse_prompt_ids(tokenizer, chat),
                                     encode_target(tokenizer, render_execution_result(value) + END)))
        done += list(m.tool_calls)
    return out, n_errors


def build_samples(tasks: list[Task], tokenizer, cfg: SFTConfig) -> tuple[list[Sample], list[Sample]]:
    acts, rehs = [], []
    for t in tasks:
        packed = packed_act_sample(t, tokenizer) if cfg.pack_act else None
        acts += [packed] if packed is not None else act_samples(t, tokenizer)
        rehs += rehearse_samples(t, tokenizer, few_shot=cfg.few_shot, style=cfg.rehearse_style)
        rehs += error_rehearse_samples(t, tokenizer, share=cfg.error_demos, seed=cfg.seed, few_shot=cfg.few_shot,
                                       style=cfg.rehearse_style)[0]
    keep = lambda s: len(s.ids) <= cfg.max_len  # noqa: E731
    return [s for s in acts if keep(s)], [s for s in rehs if keep(s)]


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


def batch_loss(model, batch: list[Sample], pad_id: int, share_prefix: bool) -> tuple[torch.Tensor, list[float]]:
    """Token-mean cross-entropy over the batch's target tokens, and each sample's own mean (for logging).

    share_prefix: the batch's common prefix runs once and the sequences continue it in length-sorted passes,
    the output layer only at target positions (`envace.trainers.packing.prefix_pass`); otherwise one padded
    forward with full logits. Both compute the same loss."""
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
    packs = shared_prefix_packs([s.ids for s in batch], reads, batch[0].role)
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


def sharded_batch_grads(model, batch: list[Sample], pad_id: int, share_prefix: bool,
                        runner: ShardRunner) -> tuple[torch.Tensor, list[float]]:
    """`batch_loss` + backward with the batch cut into `runner.n_threads` shards of similar length, each
    in its own thread; sets the parameters' `.grad` to the batch's gradient (each shard's token-mean loss
    weighted by its share of the batch's loss tokens). Returns the batch loss and each sample's own mean."""
    total = max(sum(loss_tokens(s) for s in batch), 1)
    row_loss = [0.0] * len(batch)

    def shard_loss(idx: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        loss, rows = batch_loss(model, [batch[i] for i in idx], pad_id, share_prefix)
        for i, r in zip(idx, rows):
            row_loss[i] = r
        scaled = loss * (sum(loss_tokens(batch[i]) for i in idx) / total)
        return scaled, scaled.detach()

    parts = balanced_shards([len(s.ids) for s in batch], runner.n_threads)
    params = [p for p in model.parameters() if p.requires_grad]
    results = runner.grads(params, [functools.partial(shard_loss, idx) for idx in parts])
    model.zero_grad(set_to_none=True)
    for _, grads in results:  # in shard order
        add_grads(params, grads)
    losses = [loss for loss, _ in results]
    return sum(losses[1:], losses[0]), row_loss


def lr_at(step: int, total: int, cfg: SFTConfig) -> float:
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    frac = min(1.0, (step - cfg.warmup_steps) / max(1, total - cfg.warmup_steps))
    return cfg.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))


def sft(cfg: SFTConfig) -> dict:
    """Train and save `<out_dir>/model`. Returns a summary (steps, samples, final losses, wall time)."""
    plan = apply_thread_policy(cfg.threads)
    torch.manual_seed(cfg.seed)
    rng = random.Random(cfg.seed)
    device = torch.device(cfg.device) if cfg.device else pick_device()
    tasks = load_tasks(cfg.data)  # before the model: a bad data file fails in a second, not after a load
    model, tok = load_policy(cfg.model, device=device)
    acts, rehs = build_samples(tasks, tok, cfg)
    if not acts and not rehs:
        raise ValueError(f"no SFT samples fit max_len={cfg.max_len}; raise max_len or check the data")
    out = Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    cfg.save_resolved(out)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
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
            loss, row_loss = batch_loss(model, batch, tok.pad_token_id, cfg.share_prefix)
            opt.zero_grad(set_to_none=True)
            loss.backward()
        else:
            loss, row_loss = sharded_batch_grads(model, batch, tok.pad_token_id, cfg.share_prefix, runner)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        for s, row_l in zip(batch, row_loss):
            losses[s.role.value].append(row_l)
        step += 1
        bar.update(1)
        if step % 25 == 0:
            bar.set_postfix(loss=f"{loss.item():.3f}")
    bar.close()
    return step
