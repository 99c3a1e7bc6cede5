"""Peak GPU memory of verl 0.9.1's old log-prob, reference log-prob and actor-update paths for one
micro-batch, counted tensor by tensor from verl's FSDP engine code: what `envace train --backend verl
--dry-run` prints and docs/gpu.md's memory table holds.

A micro-batch's *padded* tokens P are what the model and the logits are computed on. Without
remove-padding (sdpa) verl pads every row to the micro-batch's longest row, P = rows x longest, while its
dynamic batch size caps the *real* tokens: {15000, 3000, 1000, 1000} is 20,000 real tokens under a
20,000 cap and P = 60,000. With remove-padding (flash-attention 2) rows are packed, P = real tokens.

Bytes held at the peak, V = vocabulary, s = bytes of the log-softmax dtype:
- logits: 2 V P (bf16 LM-head output, alive until the micro-batch ends);
- fp32 temperature copy: 4 V P when some row's temperature is not 1 (envace's fp32 division,
  temperature.py); then the softmax work runs in fp32, s = 4, else on the bf16 logits, s = 2;
- old log-probs (verl asks for the entropy there): the softmax and one temporary of the same size
  (logsumexp's exponentials, then the softmax-weighted logits), 2 s V P; with verl's entropy chunking
  (remove-padding only) 2 s V x chunk. The label log-probs come after the entropy is freed: verl's row
  loop holds one row's s V longest (flash-attn's in-place cross-entropy: nothing more);
- reference log-probs: the same without the entropy;
- update: two gradient buffers of the log-softmax backward (label gather, logsumexp), 2 s V P (one with
  flash-attn's in-place cross-entropy), the log-softmax output kept for the backward on bf16 logits, s V P
  (in fp32 the backward keeps the temperature copy instead), the entropy's 2 s V P when the actor computes it, and the
  gradient-checkpointed layer inputs, 2 H L P (bf16 hidden state per decoder layer);
- sdpa's boolean 4-D mask, rows x longest^2 bytes, when a padded micro-batch holds more than one row.
Not counted: the FSDP shards of weights and gradients (optimizer states are offloaded), one layer's
recomputed activations, the allocator's fragmentation. An estimate from the code, not a measurement.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

GB = 1e9  # decimal gigabytes, as nvidia-smi's MiB are not: the unit of every printed number
PATHS = ("old log-probs", "ref log-probs", "update")


@dataclass(frozen=True)
class ModelShape:
    """The sizes the estimate needs (defaults: Qwen3-8B)."""

    vocab: int = 151_936
    hidden: int = 4096
    layers: int = 36


@dataclass(frozen=True)
class MicroBatch:
    """`rows` rows, the longest `longest` tokens, `real` tokens in all; `packed` = remove-padding."""

    rows: int
    longest: int
    real: int
    packed: bool

    @property
    def padded(self) -> int:
        return self.real if self.packed else self.rows * self.longest


@dataclass(frozen=True)
class PathEstimate:
    path: str
    micro_batch: MicroBatch
    terms: dict[str, float] = field(default_factory=dict)  # name -> bytes

    @property
    def total(self) -> float:
        return sum(self.terms.values())

    def line(self) -> str:
        mb = self.micro_batch
        shape = (f"{mb.real} packed tokens" if mb.packed else
                 f"{mb.rows} row{'s' if mb.rows > 1 else ''} x {mb.longest} = {mb.padded} padded tokens "
                 f"({mb.real} real)")
        parts = " + ".join(f"{name} {value / GB:.1f}" for name, value in self.terms.items() if value)
        return f"{self.path}: {shape}: {parts} = {self.total / GB:.1f} GB"


def worst_micro_batch(lengths: Sequence[int], *, packed: bool, rows_per_micro_batch: int | None = None,
                      token_cap: int | None = None) -> MicroBatch:
    """The micro-batch of `lengths` (real tokens per row) with the most padded tokens that verl may form:
    the longest row and the others that make it worst.

    `token_cap` (dynamic batch size, real tokens <= cap): padded, as many rows as fit (shortest first);
    packed, the most real tokens that fit (an exact subset sum). `rows_per_micro_batch` (fixed size): that
    many rows, the longest ones when packed.
    """
    if not lengths or min(lengths) < 1:
        raise ValueError(f"row lengths {list(lengths)} must be a non-empty list of positive token counts")
    if (token_cap is None) == (rows_per_micro_batch is None):
        raise ValueError("give exactly one of token_cap (dynamic batch size) or rows_per_micro_batch")
    rest = sorted(lengths, reverse=True)
    longest, rest = rest[0], rest[1:]
    if token_cap is None:
        taken = rest[: max(0, int(rows_per_micro_batch) - 1)] if packed else \
            sorted(rest)[: max(0, int(rows_per_micro_batch) - 1)]
        return MicroBatch(rows=1 + len(taken), longest=longest, real=longest + sum(taken), packed=packed)
    if longest > token_cap:
        raise ValueError(f"a row of {longest} tokens does not fit the token cap {token_cap}")
    room = token_cap - longest
    if not packed:
        taken = []
        for n in sorted(rest):
            if n <= room:
                taken.append(n)
                room -= n
        return MicroBatch(rows=1 + len(taken), longest=longest, real=longest + sum(taken), packed=False)
    reach = {0: 0}  # subset sum of the other rows -> rows in it
    for n in rest:
        for total, rows in list(reach.items()):
            if total + n <= room and total + n not in reach:
                reach[total + n] = rows + 1
    best = max(reach)
    return MicroBatch(rows=1 + reach[best], longest=longest, real=longest + best, packed=True)


def estimate_paths(mb: MicroBatch, shape: ModelShape = ModelShape(), *, fp32_copy: bool, flash_ce: bool = False,
                   entropy_chunk: int | None = None, update_entropy: bool = False) -> list[PathEstimate]:
    """Bytes of the three paths for micro-batch `mb` (see the module docstring for each term)."""
    v, p = shape.vocab, mb.padded
    s = 4 if fp32_copy else 2
    base = {"logits": 2 * v * p, "fp32 temperature copy": 4 * v * p if fp32_copy else 0}
    label_row = 0 if flash_ce else s * v * mb.longest  # verl's row loop: one row's log-softmax at a time
    mask = 0 if mb.packed or mb.rows == 1 else mb.rows * mb.longest ** 2
    entropy = 2 * s * v * (min(entropy_chunk, p) if entropy_chunk else p)
    old = {**base, "entropy": entropy} if entropy >= label_row else {**base, "label log-probs": label_row}
    ref = {**base, "label log-probs": label_row}
    # verl's row loop on bf16 logits keeps each row's log-softmax for the backward; in fp32 it keeps the copy
    saved = 0 if fp32_copy or flash_ce else s * v * p
    update = {**base, "saved log-softmax": saved, "log-softmax gradients": (1 if flash_ce else 2) * s * v * p,
              "entropy": 2 * s * v * p if update_entropy else 0,
              "checkpointed activations": 2 * shape.hidden * shape.layers * p}
    for terms in (old, ref, update):
        terms["sdpa mask"] = mask
    return [PathEstimate(name, mb, terms) for name, terms in zip(PATHS, (old, ref, update))]


def needs_fp32_copy(temperatures: Sequence[float]) -> bool:
    """envace's fp32 division runs unless every row is at temperature 1 (verl's no-copy scalar path)."""
    return any(float(t) != 1.0 for t in temperatures)


def launch_temperatures(cfg: Any) -> list[float]:
    """The log-prob temperatures a `VerlLaunchConfig`'s rows carry: each role's, else the rollout's."""
    from envace.engines.base import logprob_temperature

    return sorted({logprob_temperature(cfg.temperature if r.temperature is None else r.temperature)
                   for r in (cfg.loop.act, cfg.loop.rehearse)})


def launch_estimates(cfg: Any, lengths: Sequence[int] | None = None) -> list[PathEstimate]:
    """The three paths for a `VerlLaunchConfig`, on the worst micro-batch of `lengths` (default: its
    `memory.rows`, else one row of max_model_len) under its micro-batching."""
    packed = cfg.attn_implementation == "flash_attention_2"
    lengths = list(lengths or cfg.memory.rows or [cfg.max_model_len])
    if cfg.micro_batching_mode() == "tokens":
        log_prob = update = worst_micro_batch(lengths, packed=packed, token_cap=cfg.token_cap())
    else:  # the log-prob micro-batch may hold more rows than the update's
        log_prob = worst_micro_batch(lengths, packed=packed, rows_per_micro_batch=cfg.log_prob_micro_batch_per_gpu)
        update = worst_micro_batch(lengths, packed=packed, rows_per_micro_batch=cfg.micro_batch_per_gpu)
    shape = ModelShape(cfg.memory.vocab, cfg.memory.hidden, cfg.memory.layers)
    kw = {"fp32_copy": needs_fp32_copy(launch_temperatures(cfg)), "flash_ce": packed,
          "entropy_chunk": ENTROPY_CHUNK if packed else None}
    return estimate_paths(log_prob, shape, **kw)[:2] + estimate_paths(update, shape, **kw)[2:]


ENTROPY_CHUNK = 2048  # verl's entropy_from_logits_chunk_size default (remove-padding path)


def memory_lines(cfg: Any) -> list[str]:
    """The dry run's memory block: the three paths on the config's row mix, and on one row of
    max_model_len when the mix holds none that long."""
    mode = cfg.micro_batching_mode()
    how = (f"micro-batches of at most {cfg.token_cap()} real tokens" if mode == "tokens" else
           f"micro-batches of {cfg.log_prob_micro_batch_per_gpu} (log-probs) / {cfg.micro_batch_per_gpu} "
           "(update) rows")
    pad = "rows packed (remove-padding)" if cfg.attn_implementation == "flash_attention_2" else \
        "sdpa pads each row to the micro-batch's longest"
    temps = launch_temperatures(cfg)
    copy = "with" if needs_fp32_copy(temps) else "without"
    lengths = list(cfg.memory.rows or [cfg.max_model_len])
    lines = [f"# memory per GPU (estimate, envace.trainers.verl.memory): {how}; {pad}; log-prob temperatures "
             f"{temps}, so {copy} the fp32 temperature copy; rows {lengths}:"]
    lines += [f"#   {e.line()}" for e in launch_estimates(cfg, lengths)]
    if max(lengths) < cfg.max_model_len:
        lines.append(f"# one row of max_model_len {cfg.max_model_len} tokens:")
        lines += [f"#   {e.line()}" for e in launch_estimates(cfg, [cfg.max_model_len])]
    lines.append("# (on top of the FSDP weight / gradient shards; docs/gpu.md, 'Log-prob and update memory')")
    return lines
