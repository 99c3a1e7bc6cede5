"""A supervised batch's sequences in prefix groups: sequences that go on sharing a longer prefix than the
whole batch's get a trunk of their own where it pays (`shared_prefix_packs`), and thread shards keep such
sequences together (`prefix_shards`). Layouts by hand; shards against an exhaustive search whose tree sizes
are counted as sets of distinct prefixes."""

from __future__ import annotations

import itertools
import random

import pytest
import torch

import envace.trainers.prefix_passes as passes_mod
from envace.thread_shards import prefix_shards
from envace.trainers.packing import shared_prefix_packs
from envace.types import Role


@pytest.fixture(autouse=True)
def one_thread():
    """The pass cost scales with torch's thread count; SFT shards run at one thread."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _reads(seqs):
    return [[len(s) - 2] for s in seqs]  # each sequence's last token is its target


def test_groups_that_share_a_longer_prefix_get_their_own_trunk_by_hand():
    base = [1, 2, 3]
    x = [base + [10] * 150 + [100 + i, 5] for i in range(3)]      # 3 x 150 > 153: a trunk of 153
    y = [base + [20] * 150 + [200 + i, 6] for i in range(2)]      # 2 x 150 > 153: a trunk of 153
    z = [base + [30, 31, 32]]                                      # alone: stays on the common prefix
    w = [base + [40, 41, 42, 50, 7], base + [40, 41, 42, 51, 8]]   # 2 x 3 = 6, not > 6: stays too
    seqs = x + y + z + w
    packs = shared_prefix_packs(seqs, _reads(seqs), Role.ACT)
    assert [p.ids for p in packs] == [x[0][:153], y[0][:153], base]
    assert [p.branches for p in packs] == [[[100], [101], [102]], [[200], [201]],
                                           [[30, 31], [40, 41, 42, 50], [40, 41, 42, 51]]]
    assert [[s.row for s in p.segments] for p in packs] == [[0, 1, 2], [3, 4], [5, 6, 7]]
    # each read maps into its pack's layout [trunk; branch 0; branch 1; ...]: a sequence's target is read
    # at its last branch token
    assert [s.read for p in packs for s in p.segments] == [[153], [154], [155], [153], [154], [4], [8], [12]]
    assert sum(p.tokens for p in packs) == 153 + 3 + 153 + 2 + 3 + 2 + 4 + 4
    # without groups: one pack; its trunk of 3 saves 7 x 3 tokens, less than a pass, so it has none
    (one,) = shared_prefix_packs(seqs, _reads(seqs), Role.ACT, groups=False)
    assert one.ids == [] and one.branches == [s[:-1] for s in seqs]


def test_groups_split_again_inside_a_group():
    base = [1, 2]
    deep = [base + [10] * 50 + [40] * 300 + [i, 9] for i in range(2)]  # within the 10s: 2 x 300 > 352
    other = base + [10] * 50 + [50, 9]
    seqs = deep + [other, base + [10] * 50 + [60, 9]]
    packs = shared_prefix_packs(seqs, _reads(seqs), Role.ACT)
    assert [len(p.ids) for p in packs] == [352, 52]
    assert [[s.row for s in p.segments] for p in packs] == [[0, 1], [2, 3]]


def test_groups_are_taken_only_where_the_trunks_pay_for_the_trunk_pass(monkeypatch):
    seqs = [[1, 2] + [10] * 20 + [i, 9] for i in range(3)] + [[1, 2, 30, 31]]
    # trunks would save 2 x 22 = 44 tokens, less than a pass: one pack of the common prefix's rule
    assert passes_mod.default_pass_cost() == 256
    (pack,) = shared_prefix_packs(seqs, _reads(seqs), Role.ACT)
    assert pack.ids == [] and len(pack.branches) == 4
    monkeypatch.setattr(passes_mod, "BRANCH_PASS_COST", 0)
    packs = shared_prefix_packs(seqs, _reads(seqs), Role.ACT)
    assert [p.ids for p in packs] == [seqs[0][:22], [1, 2]]


def test_prefix_shards_by_hand():
    a = [[1, 2, 3, 4, 5, i] for i in range(3)]
    b = [[7, 8, 9, 4, 5, i] for i in range(3)]
    # interleaved in the batch; each family's tree is 5 + 3 = 8 tokens, any mix is larger
    seqs = [a[0], b[0], a[1], b[1], a[2], b[2]]
    assert prefix_shards(seqs, 2) == [[0, 2, 4], [1, 3, 5]]
    assert prefix_shards(seqs, 1) == [[0, 1, 2, 3, 4, 5]]
    assert prefix_shards([[5], [4]], 4) == [[1], [0]]  # never an empty shard; lexicographic order
    # the long sequence alone bounds the largest tree (20); a third shard halves the family's run evenly
    family = [[1, i] for i in range(4)]
    assert prefix_shards(family + [[9] * 20], 2) == [[0, 1, 2, 3], [4]]
    assert prefix_shards(family + [[9] * 20], 3) == [[0, 1], [2, 3], [4]]
    assert prefix_shards([], 2) == []
    with pytest.raises(ValueError, match="n_shards"):
        prefix_shards(seqs, 0)


def _tree_size(seqs) -> int:
    return len({tuple(s[:j]) for s in seqs for j in range(1, len(s) + 1)})


@pytest.mark.parametrize("seed", range(16))
def test_prefix_shards_least_largest_tree_over_every_contiguous_cut(seed):
    rng = random.Random(seed)
    stems = [[rng.randrange(1, 4) for _ in range(rng.randrange(1, 6))] for _ in range(3)]
    seqs = [rng.choice(stems) + [rng.randrange(1, 4) for _ in range(rng.randrange(1, 5))]
            for _ in range(rng.randrange(2, 9))]
    n = 1 + seed % 4
    got = prefix_shards(seqs, n)
    assert sorted(i for s in got for i in s) == list(range(len(seqs)))
    assert len(got) == min(n, len(seqs)) and all(got)
    order = sorted(range(len(seqs)), key=lambda i: (seqs[i], i))
    best = min(max(_tree_size([seqs[i] for i in order[a:b]]) for a, b in zip((0,) + cuts, cuts + (len(seqs),)))
               for k in range(n) for cuts in itertools.combinations(range(1, len(seqs)), k))
    assert max(_tree_size([seqs[i] for i in s]) for s in got) == best
    if n == 2:  # two shards: the earliest cut of least largest tree
        cut = min(range(1, len(seqs)), key=lambda c: (max(_tree_size([seqs[i] for i in order[:c]]),
                                                          _tree_size([seqs[i] for i in order[c:]])), c))
        assert got == [sorted(order[:cut]), sorted(order[cut:])]
