"""Forward passes over prefix packs (`envace.trainers.packing`, mode "prefix"): how a micro-batch's branches
are cut into passes (`branch_chunks`: padded tokens against a per-pass cost), and `prefix_pass`, which lays
the trunks and the passes out as one state table, maps every read position into it and runs
`envace.engines.logprobs.prefix_logprobs`.
"""

from __future__ import annotations

import bisect
from typing import Any

import torch

from envace.engines.logprobs import prefix_logprobs

# Cost of one more forward pass, in padded tokens (kernel launches and per-layer overhead), at one CPU
# thread; `default_pass_cost` scales it by threads^2 (per-op synchronisation grows with the team, per-token time
# falls). `branch_chunks` trades it against padding, and a trunk is kept only where it saves more tokens
# than a pass costs. Measured on the demo's SFT batches (tiny model, CPU): at one thread 32 to 256 are
# within 2 % of each other; at two threads under the passive OpenMP wait policy (`envace.cpu_threads`) a
# pass costs far more: one pass and no trunk for ~7 shared tokens are fastest (1024 here).
BRANCH_PASS_COST = 256


def default_pass_cost() -> float:
    """`BRANCH_PASS_COST` at this process's torch thread count."""
    return BRANCH_PASS_COST * torch.get_num_threads() ** 2


def branch_chunks(lengths: list[int], pass_cost: float | None = None, max_tokens: int | None = None) -> list[list[int]]:
    """Branches (by index into `lengths`) cut into forward passes: sorted longest first, cut into runs that
    minimise padded tokens (run size x its longest) + `pass_cost` per run (default: `default_pass_cost()`);
    a run holds at most `max_tokens` padded tokens unless one branch alone is longer."""
    cost = default_pass_cost() if pass_cost is None else pass_cost
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    n = len(order)
    best = [0.0] + [float("inf")] * n  # best[j]: the first j branches (in order) cut into runs
    cut = [0] * (n + 1)
    for j in range(1, n + 1):
        for i in range(j - 1, -1, -1):  # run order[i:j], its longest is order[i]
            width = lengths[order[i]]
            if max_tokens is not None and j - i > 1 and (j - i) * width > max_tokens:
                break
            c = best[i] + (j - i) * width + cost
            if c < best[j]:
                best[j], cut[j] = c, i
    runs: list[list[int]] = []
    j = n
    while j > 0:
        runs.append(order[cut[j]:j])
        j = cut[j]
    return runs[::-1]


def prefix_pass(model, packs: list[Any], targets: list[int], temps: list[float], pad_id: int,
                max_tokens: int | None = None, **kw) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probs (N,) (and entropies) of `targets`, one per read position of the prefix packs' segments in
    order (`envace.trainers.packing.Pack`, which imports this module), at `temps`: the trunks in one pass,
    the branches in `branch_chunks` passes of at most `max_tokens` padded tokens. `kw` as
    `envace.engines.logprobs.prefix_logprobs`."""
    device = next(model.parameters()).device
    width = max(len(p.ids) for p in packs)
    trunk_ids = torch.full((len(packs), width), int(pad_id), dtype=torch.long)
    for i, p in enumerate(packs):
        trunk_ids[i, :len(p.ids)] = torch.tensor(p.ids, dtype=torch.long)
    branches = [(i, b) for i, p in enumerate(packs) for b in p.branches or ()]
    # state-table row of each branch's first token: trunks first (P x width), then each run (B x its width)
    first_row = [0] * len(branches)
    chunks = []
    base = len(packs) * width
    for run in branch_chunks([len(b) for _, b in branches], max_tokens=max_tokens):
        tb = len(branches[run[0]][1])
        ids = torch.full((len(run), tb), int(pad_id), dtype=torch.long)
        for r, k in enumerate(run):
            b = branches[k][1]
            ids[r, :len(b)] = torch.tensor(b, dtype=torch.long)
            first_row[k] = base + r * tb
        chunks.append((ids.to(device), torch.tensor([len(branches[k][1]) for k in run], device=device),
                       torch.tensor([branches[k][0] for k in run], device=device)))
        base += len(run) * tb
    read: list[int] = []
    k0 = 0  # index of the pack's first branch in `branches`
    for i, pack in enumerate(packs):
        n = len(pack.ids)
        starts = [n]
        for b in pack.branches or ():
            starts.append(starts[-1] + len(b))
        for seg in pack.segments:
            for t in seg.read:
                if t < n:
                    read.append(i * width + t)
                    continue
                k = bisect.bisect_right(starts, t) - 1  # the branch holding virtual position t
                assert k < len(starts) - 1, "a read past the last branch (a chain's last token is never read)"
                read.append(first_row[k0 + k] + t - starts[k])
        k0 += len(pack.branches or ())
    if len(read) != len(targets) or len(temps) != len(targets):
        raise ValueError(f"{len(read)} read positions, {len(targets)} targets and {len(temps)} temperatures; "
                         f"pass one target and temperature per read position")
    return prefix_logprobs(model, trunk_ids.to(device), torch.tensor([len(p.ids) for p in packs], device=device),
                           chunks, torch.tensor(read, device=device), torch.tensor(targets, device=device),
                           torch.tensor(temps, device=device), **kw)
