"""The fast engine's cache layout: `KVCache`, a static per-call K/V cache (K transposed, so a decode step writes
one column), and `TrunkIndex`, where each row of a call sits among the trunk rows of the prompts it shares
(envace.engines.fast_model's `decode_shared`): which trunk row it reads, its slot there, and whether the rows
lie in trunk-row order with every slot held (then slots are reached by strided copies, not an index). A prompt
with more rows than the most common count takes several trunk rows (`TrunkIndex.balanced`). Not in the paper:
an execution choice of the embedded engine.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


class KVCache:
    """Static per-call cache: K transposed (rows*kvh, hd, T), V (rows*kvh, T, hd), and a mask bias per row."""

    def __init__(self, n_layers: int, rows: int, kvh: int, hd: int, width: int, dtype, device) -> None:
        self.rows, self.kvh = rows, kvh
        self.k = [torch.zeros(rows * kvh, hd, width, dtype=dtype, device=device) for _ in range(n_layers)]
        self.v = [torch.zeros(rows * kvh, width, hd, dtype=dtype, device=device) for _ in range(n_layers)]
        self.bias = torch.zeros(rows, 1, 1, width, dtype=dtype, device=device)

    def copy_rows(self, dst: torch.Tensor, src: torch.Tensor) -> None:
        """Row dst[i] becomes a copy of row src[i] (keys, values and mask bias)."""
        kvh = self.kvh
        for k, v in zip(self.k, self.v):
            kr, vr = k.view(self.rows, kvh, *k.shape[1:]), v.view(self.rows, kvh, *v.shape[1:])
            kr[dst] = kr[src]
            vr[dst] = vr[src]
        self.bias[dst] = self.bias[src]

    def keep(self, sel: torch.Tensor) -> None:
        """Drop the rows not in `sel` (a copy of the live rows, done rarely: see the engine)."""
        kvh = self.kvh
        self.k = [k.view(self.rows, kvh, *k.shape[1:]).index_select(0, sel).view(-1, *k.shape[1:]) for k in self.k]
        self.v = [v.view(self.rows, kvh, *v.shape[1:]).index_select(0, sel).view(-1, *v.shape[1:]) for v in self.v]
        self.bias = self.bias.index_select(0, sel)
        self.rows = int(sel.numel())


@dataclass
class TrunkIndex:
    """For `DecoderKernel.decode_shared`: the trunk row (shared prompt) each cache row decodes from, and the
    row's slot among that prompt's rows."""

    group: torch.Tensor  # (rows,) trunk row of each cache row
    slot: torch.Tensor  # (rows,) its place among the rows of its trunk row
    n_groups: int  # trunk rows
    slots: int  # the most rows of one trunk row
    regular: bool = False  # row r is slot r % slots of trunk row r // slots, every slot held

    @classmethod
    def of(cls, group: list[int], n_groups: int, device) -> TrunkIndex:
        seen = [0] * n_groups
        slot = []
        for g in group:
            slot.append(seen[g])
            seen[g] += 1
        n = max(seen)
        regular = len(group) == n_groups * n and group == [r // n for r in range(len(group))]
        return cls(torch.tensor(group, device=device), torch.tensor(slot, device=device), n_groups, n, regular)

    @classmethod
    def balanced(cls, prompt: list[int], n_prompts: int, device) -> tuple[TrunkIndex, list[int]]:
        """Rows that share prompts (`prompt`: each row's prompt index) laid out in trunk rows of at most `cap`
        rows each, a prompt with more rows taking several trunk rows (copies of its K/V): a step's matmuls run
        over trunk rows x slots, so one prompt with twice the rows of the others (a GRPO batch holding a task
        twice) would otherwise leave half of every other trunk row's slots empty. `cap` is the most common
        row count (the largest on a tie). Returns the index and each trunk row's prompt."""
        counts = [0] * n_prompts
        for p in prompt:
            counts[p] += 1
        cap = max(set(counts), key=lambda c: (counts.count(c), c))
        seen, current, of_row, group = [0] * n_prompts, [0] * n_prompts, [], []
        for p in prompt:
            if seen[p] % cap == 0:  # a new trunk row for this prompt
                current[p] = len(of_row)
                of_row.append(p)
            group.append(current[p])
            seen[p] += 1
        return cls.of(group, len(of_row), device), of_row

    def keep(self, rows: list[int]) -> tuple[TrunkIndex, torch.Tensor]:
        """The index after `KVCache.keep` of these cache rows, and the trunk rows they still use (for the trunk's
        own `KVCache.keep`: a prompt whose rows all finished is no longer read); groups and slots renumbered."""
        group = self.group.tolist()
        used = sorted({group[r] for r in rows})
        new = {g: i for i, g in enumerate(used)}
        device = self.group.device
        return TrunkIndex.of([new[group[r]] for r in rows], len(used), device), torch.tensor(used, device=device)
