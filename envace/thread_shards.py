"""Data-parallel threads inside one CPU process: a batch cut into shards, each shard run in its own Python
thread at one torch thread. Two users: an SFT step (envace.trainers.sft: each shard's forward and
backward, the shards' gradients summed in shard order into `param.grad`, sequences that share a prefix
kept in one shard by `prefix_shards`; the same for a policy update's micro-batches,
envace.trainers.update) and a generation call
(envace.engines.fast: each shard's requests generated on their own, the results put back in order).

Why: a small model's ops are too short for torch's intra-op threads to pay. Every op of a two-thread team
ends at a barrier, and under the passive wait policy (envace.cpu_threads) the second thread is woken for
each one, so the demo's SFT step runs barely faster on two threads than on one. torch releases the GIL
inside its kernels and its autograd engine, so two shards on two cores overlap almost entirely, as two
sweep cells side by side do (docs/performance.md, "SFT on two cores: shards in threads").

Equality (SFT): each shard's loss is its share of the batch loss (the batch loss is a token mean, so a shard
whose own token-mean loss is l_i over n_i of the batch's n target tokens contributes l_i * n_i / n), so
the summed gradients are the batch's gradient up to float rounding of the summation order
(tests/trainers/test_thread_shards.py, float64). One shard is the plain path, op for op.
A generation shard gives each request what it gets alone or in any batch (the fast engine's contract).
This is not in the paper; it is an execution choice of the embedded CPU backend.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import TypeVar

import torch

T = TypeVar("T")
R = TypeVar("R")


def balanced_shards(sizes: Sequence[int], n_shards: int) -> list[list[int]]:
    """Indices 0..len(sizes)-1 cut into at most `n_shards` non-empty shards of similar total size: the
    largest item first, each to the shard with the least so far (ties to the lowest shard); each shard's
    indices in ascending order. Deterministic."""
    if n_shards < 1:
        raise ValueError(f"n_shards {n_shards} must be >= 1")
    n = min(n_shards, len(sizes))
    if n <= 1:
        return [list(range(len(sizes)))] if sizes else []
    shards: list[list[int]] = [[] for _ in range(n)]
    load = [0] * n
    for i in sorted(range(len(sizes)), key=lambda i: (-sizes[i], i)):
        k = min(range(n), key=lambda k: (load[k], k))
        shards[k].append(i)
        load[k] += sizes[i]
    return [sorted(s) for s in shards]


def shared_prefix_length(a: Sequence[int], b: Sequence[int]) -> int:
    """How many tokens `a` and `b` share at their start."""
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def prefix_shards(seqs: Sequence[Sequence[int]], n_shards: int) -> list[list[int]]:
    """Indices of `seqs` cut into at most `n_shards` non-empty shards that keep sequences sharing a prefix
    together, for shards that run shared prefixes once (envace.trainers.packing.shared_prefix_packs): the
    sequences in lexicographic order, cut into contiguous runs that minimise the largest run's prefix-tree
    size (a sorted run's tree has sum(len) - sum(shared prefix of neighbours) tokens); each shard's indices
    in ascending order. Deterministic (ties by index).

    A run's tree only grows as the run does, so the least largest tree is found by bisection on it, each
    bound checked by filling runs greedily from the last sequence back (O(n log total) for n sequences; with
    two shards this is the earliest cut of least largest tree); runs are then split, largest first, until
    there are `n_shards` (splitting never grows the largest)."""
    if n_shards < 1:
        raise ValueError(f"n_shards {n_shards} must be >= 1")
    n = min(n_shards, len(seqs))
    if n <= 1:
        return [list(range(len(seqs)))] if seqs else []
    order = sorted(range(len(seqs)), key=lambda i: (list(seqs[i]), i))
    m = len(order)
    shared = [0] + [shared_prefix_length(seqs[order[i - 1]], seqs[order[i]]) for i in range(1, m)]
    total = [0] * (m + 1)  # total[j]: sum(len) - sum(shared with the previous) over order[:j]
    for j in range(m):
        total[j + 1] = total[j] + len(seqs[order[j]]) - shared[j]

    def tree(a: int, b: int) -> int:  # prefix-tree tokens of order[a:b]
        return total[b] - total[a] + shared[a]

    def greedy(bound: int) -> list[tuple[int, int]]:  # runs filled from the right, each tree <= bound
        runs, b = [], m
        for a in range(m - 1, -1, -1):
            if tree(a, b) > bound:
                runs.append((a + 1, b))
                b = a + 1
        return [(0, b)] + runs[::-1]

    lo, hi = max(tree(i, i + 1) for i in range(m)), tree(0, m)
    while lo < hi:
        mid = (lo + hi) // 2
        if len(greedy(mid)) <= n:
            hi = mid
        else:
            lo = mid + 1
    runs = greedy(lo)
    while len(runs) < n:  # split the largest run of two or more where its larger half is least
        k = max((r for r in range(len(runs)) if runs[r][1] - runs[r][0] > 1), key=lambda r: tree(*runs[r]))
        a, b = runs[k]
        c = min(range(a + 1, b), key=lambda c: max(tree(a, c), tree(c, b)))
        runs[k:k + 1] = [(a, c), (c, b)]
    return [sorted(order[a:b]) for a, b in runs]


@contextmanager
def one_torch_thread() -> Iterator[None]:
    """torch at one intra-op thread inside the block (the shards are the parallelism), restored after."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def add_grads(params: Sequence[torch.Tensor], grads: Sequence[torch.Tensor | None]) -> None:
    """`.grad += g` for every parameter a gradient reaches (`.grad` set where it was None)."""
    for p, g in zip(params, grads):
        if g is not None:
            p.grad = g if p.grad is None else p.grad + g


class ShardRunner:
    """Runs shards in `n_threads` Python threads (a pool kept for the run).

    `map(fn, items)`: fn over the items in the threads, results in item order. `grads(params, closures)`:
    each closure's loss differentiated in its thread, the gradients returned in closure order whatever
    order the threads finish in. Each pool thread sets its own torch threads to one (torch keeps the
    setting per thread); `one_torch_thread()` around a step also puts the caller's own work at one."""

    def __init__(self, n_threads: int) -> None:
        if n_threads < 2:
            raise ValueError(f"a ShardRunner needs >= 2 threads, got {n_threads}; run one shard inline instead")
        self.n_threads = n_threads
        self._pool = ThreadPoolExecutor(n_threads, thread_name_prefix="envace-shard")

    def map(self, fn: Callable[[T], R], items: Sequence[T]) -> list[R]:
        """fn(item) for every item, each call in a pool thread at one torch thread; results in item order."""
        def run(item: T) -> R:
            torch.set_num_threads(1)
            return fn(item)

        return list(self._pool.map(run, items))

    def grads(self, params: Sequence[torch.Tensor],
              closures: Sequence[Callable[[], tuple[torch.Tensor, R]]]) -> list[tuple[R, tuple]]:
        """Each closure returns (a scalar loss, anything): run in the pool threads, it gives (that thing,
        the loss's gradients w.r.t. `params`, None where it does not reach one), in closure order. Nothing
        is written to `.grad`: the caller adds them (`add_grads`) in the order it needs."""
        params = list(params)

        def run(closure: Callable[[], tuple[torch.Tensor, R]]) -> tuple[R, tuple]:
            loss, payload = closure()
            return payload, torch.autograd.grad(loss, params, allow_unused=True)

        return self.map(run, closures)

    def close(self) -> None:
        self._pool.shutdown(wait=True)

    def __enter__(self) -> ShardRunner:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


PARALLEL_STEP_MIN_PARAMS = 2_000_000  # below this an optimizer step is faster whole on one thread


class ShardedOptimizer:
    """The optimizer step of a sharded batch, run in the shard threads too: the parameters cut into one part
    per thread (similar sizes, `balanced_shards`), each part with its own optimizer. `step(shard_grads,
    max_norm)` sums each part's gradients over the shards (shard order) and takes their norms in the part's
    thread, scales every gradient by the global clip coefficient, then steps each part's optimizer in its
    thread. For an optimizer whose update is per parameter (AdamW, Adam, SGD) this is, bit for bit,
    `add_grads` per shard + `torch.nn.utils.clip_grad_norm_` + one optimizer over all parameters
    (tests/trainers/test_thread_shards.py), with the serial part of a step cut to one norm of the per-tensor
    norms. `param_groups`: every part's groups (the caller sets their learning rate).

    Below `min_params` parameters (default PARALLEL_STEP_MIN_PARAMS) the step stays whole on the calling
    thread: two hand-offs to the pool cost ~2.5 ms, more than a small model's step (`bench/sft_optimizer_step.py`:
    the demo's 0.5 M-parameter model 2.6 ms whole against 3.8 ms in two threads; 4.2 M parameters 31 against
    20 ms; SmolLM2-135M's shapes 0.99 s against 0.49 s)."""

    def __init__(self, params: Sequence[torch.Tensor], runner: ShardRunner,
                 make_optimizer: Callable[[list[torch.Tensor]], torch.optim.Optimizer],
                 min_params: int = PARALLEL_STEP_MIN_PARAMS) -> None:
        self.params = list(params)
        self.runner = runner
        sizes = [p.numel() for p in self.params]
        whole = sum(sizes) < min_params
        self.parts = [list(range(len(sizes)))] if whole else balanced_shards(sizes, runner.n_threads)
        self.optimizers = [make_optimizer([self.params[i] for i in part]) for part in self.parts]

    def _map(self, fn: Callable[[T], R], items: Sequence[T]) -> list[R]:
        return self.runner.map(fn, items) if len(self.parts) > 1 else [fn(item) for item in items]

    @property
    def param_groups(self) -> list[dict]:
        return [g for opt in self.optimizers for g in opt.param_groups]

    def step(self, shard_grads: Sequence[Sequence[torch.Tensor | None]], max_norm: float) -> torch.Tensor:
        """Set `.grad` to the shards' sum, clip to `max_norm` by the global 2-norm, step; returns the norm
        before clipping."""
        def gather(part: list[int]) -> dict[int, torch.Tensor]:
            mine = [self.params[i] for i in part]
            for p in mine:
                p.grad = None
            for grads in shard_grads:  # in shard order
                add_grads(mine, [grads[i] for i in part])
            return {i: torch.linalg.vector_norm(p.grad, 2.0) for i, p in zip(part, mine) if p.grad is not None}

        norms: dict[int, torch.Tensor] = {}
        for part_norms in self._map(gather, self.parts):
            norms.update(part_norms)
        if not norms:
            return torch.tensor(0.0)
        total = torch.linalg.vector_norm(torch.stack([norms[i] for i in sorted(norms)]), 2.0)
        coef = torch.clamp(max_norm / (total + 1e-6), max=1.0)

        def update(k: int) -> None:
            for i in self.parts[k]:
                if self.params[i].grad is not None:
                    self.params[i].grad.mul_(coef)
            self.optimizers[k].step()

        self._map(update, range(len(self.parts)))
        return total
