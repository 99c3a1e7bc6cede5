"""Packing of training rows into sequences (the layouts; envace.trainers.packed_readout reads every packed
response's log-probs from them).

Under a causal model the logits at a position depend only on the tokens before it, so rows that share a
prefix can share its computation:
- "chain": a trajectory's role calls often extend each other (the prompt of Act call j+1 starts with Act
  call j's prompt + response, then the tool result and the next turn). Rows of one trajectory and role
  whose full sequences (prompt + response) are prefixes of one another become one sequence (the
  longest); each row reads its response from it.
- "tree": the rows of one task prompt and role (its K trajectories) are merged into a prefix tree (the
  shared system prompt, tools, task and common turns once); the tree's tokens are laid out depth-first
  with position id = depth, and an explicit attention mask lets each token see exactly its ancestors
  (in depth-first order, k is an ancestor of q iff k <= q < end of k's subtree). Every token then
  computes what it computes in its own row's sequence. Masked attention costs ~N^2 for N tree tokens, so
  a task whose tree is large (long multi-turn env trajectories) keeps its chains when those are cheaper
  (`TREE_PAIR_COST`).
- "prefix": a task's chains (per role) share their longest common prefix, the trunk: it runs once with
  the KV cache, and each chain's remainder (its branch) runs against the cached trunk, batched with other
  branches of similar length (`envace.trainers.prefix_passes`: padding plus a per-pass cost). No N^2
  mask, so it suits long multi-turn trajectories whose tree is too large; it shares only the common
  prefix, where the tree shares every common turn. Needs full attention and the KV cache
  (`envace.engines.logprobs.prefix_supported`; otherwise the update falls back to "tree"). A trunk whose
  outputs are read nowhere runs its last layer only as far as its keys and values, so where a response's
  first token is read at the prompt's last position the trunk ends one token earlier and that token joins
  every branch, when this saves more token-layers than it adds (`_trunk_end`, given the model's layers).
  A supervised batch (`shared_prefix_packs`) has no prompt groups: its sequences are split into groups
  that go on sharing a longer prefix (one per domain's system prompt and tools, say) where a group's own
  trunk saves more than it costs (`_prefix_groups`).
- "auto": per task and role, whichever of its tree and its prefix pack runs fewer token-equivalents (the
  tree's N + `TREE_PAIR_COST` N^2 against the prefix pack's trunk and branch tokens): short rehearse-mode
  calls, whose K trajectories share many turns beyond the common prefix, take the tree; long multi-turn
  trajectories, whose tree mask grows as N^2, take the prefix. Tree and prefix packs never share a
  micro-batch. Needs what both need (the update falls back to "tree" without the KV cache).
- "off": one sequence per row.
Every row keeps a `Segment`: the positions whose logits predict its response tokens. The loss is
unchanged (the tests check all three against a per-row loop).

`micro_batches` sorts packs by length so that padding inside a forward stays small, caps the padded
tokens per forward, and never mixes roles in one micro-batch (so the loss function's own metrics of a
micro-batch are one role's, and each role's gradient can be read from the micro-batch gradients).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from envace.thread_shards import shared_prefix_length
from envace.trainers.prefix_passes import branch_chunks, default_pass_cost
from envace.trainers.train_rows import TrainRow
from envace.types import Role

# Cost of one attended (query, key) pair under an explicit mask, relative to one token's dense work
# (projections, MLP): measured on the tiny model on one CPU core (~0.45 us per pair vs ~0.4 ms per token
# forward + backward). A task's tree is used only where N + TREE_PAIR_COST * N^2 < its chains' tokens.
TREE_PAIR_COST = 1 / 900

class PackMode(str, Enum):
    OFF = "off"
    CHAIN = "chain"
    TREE = "tree"
    PREFIX = "prefix"
    AUTO = "auto"


@dataclass
class Segment:
    row: int         # index into the update's row list
    read: list[int]  # positions in the pack whose logits predict the row's response tokens, in order

    @property
    def length(self) -> int:
        return len(self.read)


@dataclass
class Pack:
    ids: list[int]
    role: Role
    segments: list[Segment] = field(default_factory=list)
    positions: list[int] | None = None  # position ids (tree: depth); None = 0..n-1
    ends: list[int] | None = None       # tree: end (exclusive) of each token's subtree; None = causal
    # prefix: `ids` is the trunk and each branch continues it; a segment's read positions index the virtual
    # layout [trunk; branch 0; branch 1; ...]. None for the other modes.
    branches: list[list[int]] | None = None

    @property
    def loss_tokens(self) -> int:
        return sum(s.length for s in self.segments)

    @property
    def tokens(self) -> int:
        """Tokens run for this pack (trunk and branches for a prefix pack)."""
        return len(self.ids) + sum(len(b) for b in self.branches or ())


def _is_prefix(short: list[int], long: list[int]) -> bool:
    return len(short) <= len(long) and long[:len(short)] == short


def _check(i: int, row: TrainRow) -> None:
    if not row.prompt_ids:
        raise ValueError(f"training row {i} ({row.role.value}) has an empty prompt; the first response "
                         f"token needs at least one prompt token")
    if len(row.old_logprobs) != len(row.response_ids):
        raise ValueError(f"training row {i} ({row.role.value}) has {len(row.response_ids)} response tokens but "
                         f"{len(row.old_logprobs)} old log-probs; the engine must record one per token")


def _chain_read(prompt_len: int, n: int) -> list[int]:
    return list(range(prompt_len - 1, prompt_len - 1 + n))  # logits at t predict token t + 1


def _chains(rows: list[TrainRow], idx: list[int], merge: bool) -> list[Pack]:
    packs: list[Pack] = []
    open_packs: dict[tuple[int, Role], list[Pack]] = {}
    for i in idx:
        row = rows[i]
        seq = list(row.prompt_ids) + list(row.response_ids)
        target = None
        if merge:
            for cand in open_packs.get((row.trajectory_key, row.role), []):
                if _is_prefix(seq, cand.ids):
                    target = cand
                    break
                if _is_prefix(cand.ids, seq):
                    cand.ids = seq
                    target = cand
                    break
        if target is None:
            target = Pack(ids=seq, role=row.role)
            packs.append(target)
            open_packs.setdefault((row.trajectory_key, row.role), []).append(target)
        target.segments.append(Segment(row=i, read=_chain_read(len(row.prompt_ids), len(row.response_ids))))
    return packs


def _tree(rows: list[TrainRow], idx: list[int]) -> Pack:
    """One prefix tree of the rows `idx`, laid out depth-first."""
    token: list[int] = []
    children: list[dict[int, int]] = [{}]  # node 0 is a virtual root
    paths: list[list[int]] = []
    for i in idx:
        node, path = 0, []
        for t in list(rows[i].prompt_ids) + list(rows[i].response_ids):
            nxt = children[node].get(t)
            if nxt is None:
                token.append(t)
                children.append({})
                nxt = len(token)
                children[node][t] = nxt
            node = nxt
            path.append(node)
        paths.append(path)
    order: dict[int, int] = {}  # node -> depth-first index
    ids: list[int] = []
    depth: list[int] = []
    ends: list[int] = []
    stack = [(c, 0, False) for c in reversed(list(children[0].values()))]
    while stack:
        node, d, done = stack.pop()
        if done:
            ends[order[node]] = len(ids)
            continue
        order[node] = len(ids)
        ids.append(token[node - 1])
        depth.append(d)
        ends.append(0)
        stack.append((node, d, True))
        stack.extend((c, d + 1, False) for c in reversed(list(children[node].values())))
    pack = Pack(ids=ids, role=rows[idx[0]].role, positions=depth, ends=ends)
    for i, path in zip(idx, paths):
        p = len(rows[i].prompt_ids)
        pack.segments.append(Segment(row=i, read=[order[n] for n in path[p - 1:p - 1 + len(rows[i].response_ids)]]))
    return pack


def _common_prefix(seqs: list[list[int]]) -> int:
    return min((shared_prefix_length(seqs[0], s) for s in seqs[1:]), default=len(seqs[0]))


def _trunk_end(chains: list[Pack], n: int, layers: int) -> int:
    """Where a trunk of common prefix `n` ends. Where logits are read inside it (a response's first token is
    read at its prompt's last position), just before the first such read, when moving the rest into every
    branch costs fewer token-layers than it saves: a trunk read nowhere runs its last layer only as far as
    its keys and values (envace.engines.logprobs.prefix_logprobs), so the cut pays where
    cut x chains x layers < the trunk's new length. `layers` 0 (the model unknown) keeps `n`."""
    first = min((t for c in chains for seg in c.segments for t in seg.read if t < n), default=n)
    if layers and first < n and (n - first) * len(chains) * layers < first:
        return first
    return n


def _star(chains: list[Pack], layers: int = 0, trunk: int | None = None) -> Pack:
    """One prefix pack of `chains` (whose ids share at least their first token): the common prefix as the
    trunk (cut before its first read where that pays, `_trunk_end`), each chain's remainder as a branch. A
    chain's last token is left out of its branch: its logits predict nothing, and no later token of that
    chain attends to it. `trunk`: a trunk length the caller has chosen (a prefix the chains share), kept
    whatever it saves."""
    if trunk is not None:
        n = trunk
    else:
        n = _common_prefix([c.ids for c in chains])
        if (len(chains) - 1) * n < default_pass_cost():
            n = 0  # a trunk pass would cost more than it saves: the chains run whole, as branches of no trunk
    n = _trunk_end(chains, n, layers)
    pack = Pack(ids=chains[0].ids[:n], role=chains[0].role, branches=[])
    for c in chains:
        branch = c.ids[n:len(c.ids) - 1]
        start = n + sum(len(b) for b in pack.branches)
        if branch:
            pack.branches.append(branch)
        for seg in c.segments:
            read = [t if t < n else start + t - n for t in seg.read]
            pack.segments.append(Segment(row=seg.row, read=read))
    return pack


def _prefix_groups(chains: list[Pack], n: int) -> list[tuple[int, list[Pack]]]:
    """`chains`, whose common prefix is their first `n` tokens, as (trunk length, chains) groups: the chains
    that continue with the same token at `n` form a group of their own (split again the same way) where
    their longer common prefix m saves more branch tokens than their own trunk row costs, k (m - n) > m;
    the others stay together on trunk `n`."""
    by_next: dict[int, list[Pack]] = {}
    rest: list[Pack] = []
    for c in chains:
        if len(c.ids) > n:
            by_next.setdefault(c.ids[n], []).append(c)
        else:
            rest.append(c)
    out: list[tuple[int, list[Pack]]] = []
    for sub in by_next.values():
        m = _common_prefix([c.ids for c in sub])
        if len(sub) > 1 and len(sub) * (m - n) > m:
            out.extend(_prefix_groups(sub, m))
        else:
            rest.extend(sub)
    if rest:
        out.append((n, rest))
    return out


def _grouped_stars(chains: list[Pack], layers: int = 0) -> list[Pack]:
    """`chains` as prefix packs whose trunks are the groups' common prefixes (`_prefix_groups` under each
    first token), where the tokens all trunks save pay for the trunk pass; otherwise `_stars`. One trunk pass
    runs every pack's trunk, so the trunk-pass cost is counted once for the whole set."""
    groups = [g for cs in _by_first_token(chains) for g in _prefix_groups(cs, _common_prefix([c.ids for c in cs]))]
    if sum((len(cs) - 1) * n for n, cs in groups) < default_pass_cost():
        return _stars(chains, layers)
    return [_star(cs, layers, n) for n, cs in groups]


def _stars(chains: list[Pack], layers: int = 0) -> list[Pack]:
    """`chains` as one prefix pack per first token (`layers`: the model's, for `_trunk_end`)."""
    return [_star(cs, layers) for cs in _by_first_token(chains)]


def _by_first_token(chains: list[Pack]) -> list[list[Pack]]:
    by_first: dict[int, list[Pack]] = {}
    for c in chains:
        by_first.setdefault(c.ids[0], []).append(c)
    return list(by_first.values())


def pack_rows(rows: list[TrainRow], mode: PackMode | str = PackMode.CHAIN, layers: int = 0) -> list[Pack]:
    """Packs of `rows` (see the module docstring). Rows without response tokens are left out (no loss).
    `layers`: the model's layer count, where a prefix pack's trunk may end before its first read
    (`_trunk_end`; 0 keeps every trunk at its common prefix)."""
    mode = PackMode(mode)
    idx = []
    for i, row in enumerate(rows):
        if row.response_ids:
            _check(i, row)
            idx.append(i)
    if mode in (PackMode.OFF, PackMode.CHAIN):
        return _chains(rows, idx, merge=mode is PackMode.CHAIN)
    groups: dict[tuple[Role, int], list[int]] = {}
    for i in idx:
        groups.setdefault((rows[i].role, rows[i].prompt_index), []).append(i)
    out: list[Pack] = []
    if mode is PackMode.PREFIX:
        for g in groups.values():
            out.extend(_stars(_chains(rows, g, merge=True), layers))
        return out
    for g in groups.values():
        tree, chains = _tree(rows, g), _chains(rows, g, merge=True)
        n = len(tree.ids)
        tree_cost = n + TREE_PAIR_COST * n * n  # a tree's masked attention costs ~N^2 pairs
        if mode is PackMode.AUTO:
            stars = _stars(chains, layers)
            out.extend([tree] if tree_cost < sum(p.tokens for p in stars) else stars)
            continue
        # keep the tree only where it beats the chains' tokens
        out.extend([tree] if tree_cost < sum(len(c.ids) for c in chains) else chains)
    return out


def micro_batches(packs: list[Pack], size: int, max_tokens: int | None = None) -> list[list[Pack]]:
    """Packs grouped by role (and prefix packs apart from the others), sorted by length (longest first) and
    cut into chunks of at most `size` sequences and, when `max_tokens` is set, at most `max_tokens` padded
    tokens (sequences x longest; a single longer sequence still gets its own chunk). Prefix packs count their
    trunk and branch tokens (`Pack.tokens`) and one sequence each."""
    out: list[list[Pack]] = []
    kinds = sorted({(p.role.value, p.branches is not None) for p in packs})  # prefix packs run on their own
    for role, prefix in kinds:
        cur: list[Pack] = []
        held = 0
        for p in sorted((p for p in packs if p.role.value == role and (p.branches is not None) == prefix),
                        key=lambda p: -p.tokens):
            # longest first: a plain chunk's padded width is its first sequence's length
            grown = held + p.tokens if p.branches is not None else (len(cur) + 1) * (len(cur[0].ids) if cur else 0)
            if cur and (len(cur) >= size or (max_tokens is not None and grown > max_tokens)):
                out.append(cur)
                cur, held = [], 0
            cur.append(p)
            held += p.tokens
        if cur:
            out.append(cur)
    return out


def padded_tokens(packs: list[Pack], max_tokens: int | None = None) -> int:
    """Tokens one micro-batch's forward passes run, padding included."""
    if not any(p.branches is not None for p in packs):
        return len(packs) * max(len(p.ids) for p in packs)
    lengths = [len(b) for p in packs for b in p.branches or ()]
    return (len(packs) * max(len(p.ids) for p in packs)
            + sum(len(run) * lengths[run[0]] for run in branch_chunks(lengths, max_tokens=max_tokens)))


def shared_prefix_packs(seqs: list[list[int]], reads: list[list[int]], role: Role, layers: int = 0,
                        groups: bool = True) -> list[Pack]:
    """Prefix packs of whole sequences (e.g. one supervised batch): sequence i, whose logits are read at
    positions `reads[i]`, becomes segment `row=i`; sequences that start with the same token share a trunk
    (`layers` as in `pack_rows`), and with `groups` those of them that go on sharing a longer prefix get a
    trunk of their own (`_grouped_stars`)."""
    chains = []
    for i, (seq, rd) in enumerate(zip(seqs, reads)):
        if not seq or (rd and not 0 <= min(rd) <= max(rd) < len(seq) - 1):
            raise ValueError(f"sequence {i}: read positions must lie in 0..len-2 of a non-empty sequence "
                             f"(logits at t predict token t + 1)")
        chains.append(Pack(ids=list(seq), role=role, segments=[Segment(row=i, read=list(rd))]))
    return _grouped_stars(chains, layers) if groups else _stars(chains, layers)
