"""The packed update against a slow per-row loop: a task's common prefix shared through the KV cache,
prefix-tree packing of a task's rows, chain packing of a trajectory's calls into one sequence, sorted
micro-batches and the response-only output layer change
neither the loss nor the gradients (float64,
seeded rows with chains of prompts that extend each other, two roles at their own temperatures, KL to a
perturbed reference and an entropy bonus)."""

from __future__ import annotations

import copy

import pytest
import torch

from envace.engines.base import logprob_temperature
from envace.models.loading import load_policy
from envace.trainers import prefix_passes as passes_mod
from envace.trainers import update as update_mod
from envace.trainers.config import AlgoConfig
from envace.trainers.packed_readout import packed_logprobs, tree_mask_kind
from envace.trainers.packing import micro_batches, pack_rows
from envace.trainers.prefix_passes import branch_chunks
from envace.trainers.train_rows import TrainRow
from envace.trainers.update import policy_update
from envace.types import Role


def _rand(g, n, vocab):
    return torch.randint(3, vocab, (n,), generator=g).tolist()


def chained_rows(vocab: int, seed: int) -> list[TrainRow]:
    """Act and Rehearse chains (each call's prompt = previous prompt + response + new tokens), a call that
    does not extend, another trajectory with the same first prompt, a duplicate row, a greedy row."""
    g = torch.Generator().manual_seed(seed)
    rows: list[TrainRow] = []

    def add(role, prompt, n_resp, temp, key):
        rows.append(TrainRow.standalone(role=role, prompt_ids=prompt, response_ids=_rand(g, n_resp, vocab),
                                        old_logprobs=[], temperature=temp, prompt_index=0, trajectory_key=key,
                                        reward=0.0))
        return prompt + rows[-1].response_ids

    p0 = _rand(g, 7, vocab)
    full = add(Role.ACT, p0, 4, 1.0, 0)
    full = add(Role.ACT, full + _rand(g, 3, vocab), 5, 1.0, 0)
    add(Role.ACT, full + _rand(g, 2, vocab), 3, 1.0, 0)
    q = add(Role.REHEARSE, _rand(g, 6, vocab), 3, 0.7, 0)
    add(Role.REHEARSE, q + _rand(g, 2, vocab), 4, 0.7, 0)
    add(Role.ACT, _rand(g, 5, vocab), 6, 1.0, 0)          # does not extend the chain
    add(Role.ACT, list(p0), 5, 1.0, 1)                     # another trajectory, same first prompt
    rows.append(copy.deepcopy(rows[-1]))                   # a duplicate row (same positions read twice)
    add(Role.REHEARSE, _rand(g, 4, vocab), 2, 0.0, 1)      # greedy: log-probs at T = 1
    for r in rows:
        r.advantage = float(torch.randn(1, generator=g))
    return rows


def with_old_logprobs(model, rows, seed, noise=0.3):
    """Old log-probs = current ones + noise, so ratios spread over both clip bounds."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for r in rows:
            lp, _ = _slow_row(model, r)
            r.old_logprobs = (lp + noise * torch.randn(len(lp), generator=g, dtype=lp.dtype)).tolist()
    return rows


def _slow_row(model, row):
    """Per-row full-logits forward of the unpadded sequence: (log-probs, entropies) of its response."""
    logits = model(input_ids=torch.tensor([row.prompt_ids + row.response_ids])).logits[0]
    t = logprob_temperature(row.temperature)
    lps, ents = [], []
    for j, tok in enumerate(row.response_ids):
        logp = torch.log_softmax(logits[len(row.prompt_ids) - 1 + j] / t, -1)
        lps.append(logp[tok])
        ents.append(-(logp.exp() * logp).sum())
    return torch.stack(lps), torch.stack(ents)


def slow_loss(model, rows, algo: AlgoConfig, ref_model=None) -> torch.Tensor:
    """The step's loss by the definitions, token by token (PPO clip + dual clip, k3 KL, entropy bonus)."""
    per_row = []
    for row in rows:
        lp, ent = _slow_row(model, row)
        ref = _slow_row(ref_model, row)[0].detach() if ref_model is not None else None
        terms = []
        for j in range(len(row.response_ids)):
            a = row.advantage
            ratio = torch.exp(lp[j] - row.old_logprobs[j])
            loss = torch.maximum(-a * ratio, -a * ratio.clamp(1 - algo.clip_low, 1 + algo.clip_high))
            if a < 0:
                loss = torch.minimum(loss, torch.tensor(algo.dual_clip_c * abs(a), dtype=lp.dtype))
            if ref is not None:
                d = ref[j] - lp[j]
                loss = loss + algo.kl_coef * (torch.exp(d) - d - 1).clamp(-10, 10)
            terms.append(loss - algo.entropy_coef * ent[j])
        per_row.append(torch.stack(terms))
    if algo.agg == "token-mean":
        return torch.cat(per_row).sum() / sum(len(t) for t in per_row)
    return torch.stack([t.mean() for t in per_row]).mean()


@pytest.fixture(scope="module")
def model64(tiny_model_dir):
    model = load_policy(tiny_model_dir)[0].double()
    return model


def _grads_by_sgd(model, rows, algo, micro_batch, ref=None, **kw):
    """Run policy_update with SGD(lr=1) and no clipping: the parameter change is minus the gradient."""
    m = copy.deepcopy(model)
    before = [p.detach().clone() for p in m.parameters()]
    res = policy_update(m, torch.optim.SGD(m.parameters(), lr=1.0), rows, algo, pad_id=0, micro_batch=micro_batch,
                        grad_clip=1e30, ref_model=ref, **kw)
    return res, [b - p.detach() for b, p in zip(before, m.parameters())]


def _reference_grads(model, rows, algo, ref=None):
    m = copy.deepcopy(model)
    loss = slow_loss(m, rows, algo, ref)
    loss.backward()
    return float(loss.detach()), [p.grad.detach().clone() for p in m.parameters()]


CASES = {
    "token-mean": dict(agg="token-mean"),
    "seq-mean": dict(agg="seq-mean-token-mean"),
    "kl+entropy": dict(agg="token-mean", use_kl=True, kl_coef=0.3, entropy_coef=0.05, clip_high=0.28),
}


@pytest.mark.parametrize("case", list(CASES))
def test_packed_unpacked_and_slow_loop_agree(model64, case, monkeypatch):
    algo = AlgoConfig(**CASES[case], grad_noise_scale=False)
    rows = with_old_logprobs(model64, chained_rows(model64.config.vocab_size, seed=1), seed=2)
    ref = None
    if algo.use_kl:
        ref = copy.deepcopy(model64).eval()
        with torch.no_grad():
            for p in ref.parameters():
                p.add_(0.02 * torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel()), dtype=p.dtype))
    want_loss, want = _reference_grads(model64, rows, algo, ref)
    assert tree_mask_kind(model64) == "bool"  # sdpa: the tree path runs, no silent fall-back to chains
    # packing really happened: fewer sequences (chain), fewer tokens (tree)
    assert len(pack_rows(rows, "chain")) < len(pack_rows(rows, "off"))
    assert sum(len(p.ids) for p in pack_rows(rows, "tree")) < sum(len(p.ids) for p in pack_rows(rows, "chain"))
    assert sum(p.tokens for p in pack_rows(rows, "prefix")) < sum(len(p.ids) for p in pack_rows(rows, "chain"))
    runs = [("prefix", 1, None), ("prefix", 100, None), ("prefix", 100, 0), ("auto", 100, None), ("auto", 1, 0),
            ("tree", 1, None), ("tree", 100, None),
            ("chain", 2, None), ("chain", 100, None), ("off", 3, None), ("off", 1, None)]
    for pack, mb, pass_cost in runs:
        # pass cost 0: every branch length its own forward pass (several passes against one trunk cache)
        monkeypatch.setattr(passes_mod, "BRANCH_PASS_COST", 256 if pass_cost is None else pass_cost)
        res, got = _grads_by_sgd(model64, rows, algo.model_copy(update={"pack": pack}), mb, ref=ref)
        assert res.loss == pytest.approx(want_loss, abs=1e-9), (pack, mb)
        # 1e-7, not float64's 1e-15: Qwen3's RMSNorm computes in float32 even in a float64 model, so
        # different batch shapes round differently (seen: <= 3e-8 on gradients of size up to 0.24)
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w, atol=1e-7, rtol=0)


def test_packing_merges_chains_within_trajectory_and_role():
    rows = chained_rows(700, seed=0)
    for r in rows:
        r.old_logprobs = [0.0] * len(r.response_ids)
    packs = pack_rows(rows, "chain")
    by_rows = sorted(sorted(s.row for s in p.segments) for p in packs)
    # act chain 0-1-2; rehearse chain 3-4; lone act 5; trajectory 1: the row and its duplicate 6-7; greedy 8
    assert by_rows == [[0, 1, 2], [3, 4], [5], [6, 7], [8]]
    chain = next(p for p in packs if p.segments[0].row == 0)
    assert chain.ids == rows[2].prompt_ids + rows[2].response_ids
    for seg in chain.segments:
        r = rows[seg.row]
        start = seg.read[0] + 1
        assert seg.read == list(range(start - 1, start - 1 + len(r.response_ids)))
        assert chain.ids[start:start + seg.length] == r.response_ids
        assert chain.ids[:start] == r.prompt_ids
    assert all(len({rows[s.row].role for s in p.segments}) == 1 for p in packs)


def test_micro_batches_are_sorted_and_single_role():
    rows = chained_rows(700, seed=0)
    for r in rows:
        r.old_logprobs = [0.0] * len(r.response_ids)
    mbs = micro_batches(pack_rows(rows, "off"), 2)
    for mb in mbs:
        assert len({p.role for p in mb}) == 1
    for role in (Role.ACT, Role.REHEARSE):
        lengths = [len(p.ids) for mb in mbs for p in mb if p.role == role]
        assert lengths == sorted(lengths, reverse=True)


def test_sorted_micro_batches_equal_unsorted(model64, monkeypatch):
    algo = AlgoConfig(grad_noise_scale=False)
    rows = with_old_logprobs(model64, chained_rows(model64.config.vocab_size, seed=3), seed=4)
    sorted_res, sorted_grads = _grads_by_sgd(model64, rows, algo, 2)

    def in_order(packs, size, max_tokens=None):  # the rows' own order, roles mixed, no sorting
        return [packs[i:i + size] for i in range(0, len(packs), size)]

    monkeypatch.setattr(update_mod, "micro_batches", in_order)
    res, grads = _grads_by_sgd(model64, rows, algo, 2)
    assert res.loss == pytest.approx(sorted_res.loss, abs=1e-9)
    for g, w in zip(grads, sorted_grads):
        torch.testing.assert_close(g, w, atol=1e-7, rtol=0)


@pytest.mark.parametrize("mode", ["chain", "tree", "prefix", "prefix-trunk"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_response_only_head_equals_full_logits(tiny_model_dir, dtype, mode, monkeypatch):
    if mode == "prefix-trunk":  # passes cost nothing: the short common prefixes become trunks
        monkeypatch.setattr(passes_mod, "BRANCH_PASS_COST", 0)
        mode = "prefix"
    model = load_policy(tiny_model_dir)[0].to(dtype)
    rows = chained_rows(model.config.vocab_size, seed=5)
    for r in rows:
        r.old_logprobs = [0.0] * len(r.response_ids)
    packs = pack_rows(rows, mode)
    with torch.no_grad():
        fast = packed_logprobs(model, packs, rows, pad_id=0, with_entropy=True)
        full = packed_logprobs(model, packs, rows, pad_id=0, with_entropy=True, full_logits=True)
    assert fast.rows == full.rows
    tol = 1e-5 if dtype == torch.float32 else 1e-12
    torch.testing.assert_close(fast.logprobs, full.logprobs, atol=tol, rtol=0)
    torch.testing.assert_close(fast.entropy, full.entropy, atol=tol, rtol=0)
    # and both equal the per-row loop, read through the packs (float32 RMSNorm: see above)
    for i, r in enumerate(fast.rows):
        want, _ = _slow_row(model, rows[r])
        n = len(rows[r].response_ids)
        torch.testing.assert_close(fast.logprobs[i, :n], want.detach(), atol=max(tol, 1e-7), rtol=0)
        assert fast.mask[i, :n].sum() == n and fast.mask[i, n:].sum() == 0


def test_bad_rows_are_named():
    rows = chained_rows(700, seed=0)
    with pytest.raises(ValueError, match="training row 0 .act. has 4 response tokens but 0 old log-probs"):
        pack_rows(rows)
    rows[0].old_logprobs = [0.0] * 4
    rows[0].prompt_ids = []
    with pytest.raises(ValueError, match="training row 0 .act. has an empty prompt"):
        pack_rows(rows)


def test_token_budget_caps_padded_tokens_per_micro_batch(model64):
    rows = with_old_logprobs(model64, chained_rows(model64.config.vocab_size, seed=6), seed=7)
    packs = pack_rows(rows, "off")
    for budget in (1, 30, 60, 10_000):
        mbs = micro_batches(packs, 100, max_tokens=budget)
        assert sorted(id(p) for mb in mbs for p in mb) == sorted(id(p) for p in packs)
        for mb in mbs:
            assert len(mb) == 1 or len(mb) * max(len(p.ids) for p in mb) <= budget
    assert len(micro_batches(packs, 100, max_tokens=1)) == len(packs)
    # and the loss and gradients do not depend on it
    algo = AlgoConfig(grad_noise_scale=False)
    base, want = _grads_by_sgd(model64, rows, algo, 100)
    res, got = _grads_by_sgd(model64, rows, algo, 100, max_tokens=40)
    assert res.loss == pytest.approx(base.loss, abs=1e-9)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, atol=1e-7, rtol=0)


def test_prefix_tree_layout_by_hand():
    def row(prompt, resp, key):
        return TrainRow.standalone(role=Role.ACT, prompt_ids=prompt, response_ids=resp,
                                   old_logprobs=[0.0] * len(resp), temperature=1.0, prompt_index=0,
                                   trajectory_key=key, reward=0.0)

    # two trajectories share prompt [1, 2]; the second row of trajectory 0 extends its first
    rows = [row([1, 2], [3, 4], 0), row([1, 2], [5], 1), row([1, 2, 3, 4, 6], [7], 0)]
    (tree,) = pack_rows(rows, "tree")
    # depth-first: 1 2 3 4 6 7 | 5
    assert tree.ids == [1, 2, 3, 4, 6, 7, 5]
    assert tree.positions == [0, 1, 2, 3, 4, 5, 2]
    assert tree.ends == [7, 7, 6, 6, 6, 6, 7]
    assert [s.read for s in tree.segments] == [[1, 2], [1], [4]]
    # token 5 (index 6) sees 1, 2 and itself, not the other branch
    from envace.trainers.packed_readout import _tree_inputs

    _, mask = _tree_inputs([tree], 8, torch.float32, "bool")
    assert mask[0, 0, 6].tolist() == [True, True, False, False, False, False, True, False]
    assert mask[0, 0, 5].tolist() == [True] * 6 + [False, False]
    assert mask[0, 0, 7].tolist() == [False] * 7 + [True]  # padding sees itself only


def test_tree_with_eager_attention_uses_an_additive_mask(model64):
    rows = with_old_logprobs(model64, chained_rows(model64.config.vocab_size, seed=8), seed=9)
    eager = copy.deepcopy(model64)
    eager.config._attn_implementation = "eager"
    assert tree_mask_kind(eager) == "additive"
    packs = pack_rows(rows, "tree")
    with torch.no_grad():
        a = packed_logprobs(eager, packs, rows, pad_id=0)
        b = packed_logprobs(model64, packs, rows, pad_id=0)
        c = packed_logprobs(model64, pack_rows(rows, "off"), rows, pad_id=0)
    torch.testing.assert_close(a.logprobs, b.logprobs, atol=1e-7, rtol=0)
    by_row = {r: c.logprobs[i] for i, r in enumerate(c.rows)}
    for i, r in enumerate(a.rows):
        torch.testing.assert_close(a.logprobs[i], by_row[r], atol=1e-7, rtol=0)


def test_prefix_pack_layout_by_hand(monkeypatch):
    def row(prompt, resp, key):
        return TrainRow.standalone(role=Role.ACT, prompt_ids=prompt, response_ids=resp,
                                   old_logprobs=[0.0] * len(resp), temperature=1.0, prompt_index=0,
                                   trajectory_key=key, reward=0.0)

    # trajectory 0: [1 2 3 | 4 5] then [1 2 3 4 5 6 | 7 8]: one chain 1 2 3 4 5 6 7 8
    # trajectory 1: [1 2 3 | 9];  trajectory 2: [1 2 | 10 11]
    rows = [row([1, 2, 3], [4, 5], 0), row([1, 2, 3, 4, 5, 6], [7, 8], 0), row([1, 2, 3], [9], 1),
            row([1, 2], [10, 11], 2)]
    # a trunk of 2 tokens saves (3 - 1) x 2 = 4 tokens: not worth a pass at the default cost, so no trunk
    assert passes_mod.default_pass_cost() > 4
    (whole,) = pack_rows(rows, "prefix")
    assert whole.ids == [] and whole.branches == [[1, 2, 3, 4, 5, 6, 7], [1, 2, 3], [1, 2, 10]]
    assert [s.read for s in whole.segments] == [[2, 3], [5, 6], [7 + 2], [10 + 1, 10 + 2]]
    monkeypatch.setattr(passes_mod, "BRANCH_PASS_COST", 0)  # passes cost nothing: every shared token is kept
    (pack,) = pack_rows(rows, "prefix")
    # trunk = the common prefix [1 2]; branches drop each chain's last token (8, 9, 11): no logits read there
    assert pack.ids == [1, 2]
    assert pack.branches == [[3, 4, 5, 6, 7], [3], [10]]
    assert pack.tokens == 2 + 5 + 1 + 1
    # virtual layout: trunk 0-1 | branch 0: 2-6 | branch 1: 7 | branch 2: 8
    # row 0 reads chain positions 2, 3 (in the trunk's coordinates: branch 0's first two tokens)
    assert [s.read for s in pack.segments] == [[2, 3], [5, 6], [7], [1, 8]]
    # a different first token starts another pack; another role, another pack
    other = row([5, 2], [3], 3)
    rehearse = TrainRow.standalone(role=Role.REHEARSE, prompt_ids=[1, 2], response_ids=[3], old_logprobs=[0.0],
                                   temperature=1.0, prompt_index=0, trajectory_key=0, reward=0.0)
    packs = pack_rows(rows + [other, rehearse], "prefix")
    assert sorted((p.role.value, p.ids[0], len(p.segments)) for p in packs) == [
        ("act", 1, 4), ("act", 5, 1), ("rehearse", 1, 1)]


def test_a_trunk_ends_before_its_first_read_where_that_pays_by_hand(monkeypatch):
    """Three samples of one 9-token prompt: each response's first token is read at the prompt's last position
    (8), inside the common prefix. Moving that one token into the 3 branches costs 1 x 3 x layers
    token-layers against the trunk's last layer over its 8 remaining tokens (then read nowhere)."""
    monkeypatch.setattr(passes_mod, "BRANCH_PASS_COST", 0)
    prompt = list(range(1, 10))
    rows = [TrainRow.standalone(role=Role.ACT, prompt_ids=prompt, response_ids=resp, old_logprobs=[0.0] * len(resp),
                                temperature=1.0, prompt_index=0, trajectory_key=k, reward=0.0)
            for k, resp in enumerate([[20, 21], [30], [40, 41, 42]])]
    for layers in (0, 3):  # unknown model; 1 x 3 x 3 = 9 >= 8: keeps the common prefix
        (pack,) = pack_rows(rows, "prefix", layers)
        assert pack.ids == prompt and pack.branches == [[20], [40, 41]]
        assert [s.read for s in pack.segments] == [[8, 9], [8], [8, 10, 11]]
    (pack,) = pack_rows(rows, "prefix", 2)  # 1 x 3 x 2 = 6 < 8: the trunk ends before position 8
    assert pack.ids == prompt[:8]
    assert pack.branches == [[9, 20], [9], [9, 40, 41]]
    # virtual layout: trunk 0-7 | branch 0: 8-9 | branch 1: 10 | branch 2: 11-13; no read lies in the trunk
    assert [s.read for s in pack.segments] == [[8, 9], [10], [11, 12, 13]]


def test_a_trunk_read_nowhere_runs_only_to_its_last_keys(model64, monkeypatch):
    """policy_update on rows whose trunks end before their first read: every trunk pass stops at the last
    layer's keys and values (the final norm never sees a trunk token), and the loss and gradients are those
    of the full trunk pass (layers unknown: the trunks keep their common prefix and are read)."""
    import envace.engines.logprobs as logprobs
    import envace.trainers.update as update

    monkeypatch.setattr(passes_mod, "BRANCH_PASS_COST", 0)
    algo = AlgoConfig(agg="token-mean", grad_noise_scale=False, pack="prefix")
    rows = with_old_logprobs(model64, _two_task_rows(model64.config.vocab_size, seed=3), seed=4)
    stopped, started, normed = [], [], []
    real = logprobs.trunk_keys
    monkeypatch.setattr(logprobs, "trunk_keys", lambda net, ids: stopped.append(ids.shape) or real(net, ids))
    m = copy.deepcopy(model64)
    m.model.register_forward_pre_hook(lambda mod, args: started.append(1))
    m.model.norm.register_forward_hook(lambda mod, args, out: normed.append(1))
    before = [p.detach().clone() for p in m.parameters()]
    res = policy_update(m, torch.optim.SGD(m.parameters(), lr=1.0), rows, algo, pad_id=0, micro_batch=100,
                        grad_clip=1e30)
    got = [b - p.detach() for b, p in zip(before, m.parameters())]
    assert stopped and len(started) - len(normed) == len(stopped)  # each stopped pass never reached the norm
    stopped.clear()
    monkeypatch.setattr(update, "layer_count", lambda model: 0)
    want_res, want = _grads_by_sgd(model64, rows, algo, 100)
    assert not stopped  # the trunks are read where the first response token is: the full pass
    assert res.loss == pytest.approx(want_res.loss, abs=1e-9)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, atol=1e-7, rtol=0)


def _two_task_rows(vocab: int, seed: int) -> list[TrainRow]:
    """Act rows of two tasks. Task 0: four trajectories whose first turn (8 tokens) is common, two pairs of which
    also share their second turn (6 more tokens), so a tree shares more than the common prefix. Task 1: three
    trajectories that share only their 9-token prompt."""
    g = torch.Generator().manual_seed(seed)
    rows = []

    def add(prompt, n_resp, task, key):
        rows.append(TrainRow.standalone(role=Role.ACT, prompt_ids=prompt, response_ids=_rand(g, n_resp, vocab),
                                        old_logprobs=[], temperature=1.0, prompt_index=task, trajectory_key=key,
                                        reward=0.0, advantage=float(torch.randn(1, generator=g))))

    turn1 = _rand(g, 8, vocab)
    for pair in range(2):
        turn2 = _rand(g, 6, vocab)
        for k in range(2):
            add(turn1 + turn2, 3, 0, 2 * pair + k)
    prompt = _rand(g, 9, vocab)
    for k in range(3):
        add(prompt, 4, 1, 10 + k)
    return rows


def test_auto_takes_the_cheaper_layout_per_task_and_keeps_the_loss(model64, monkeypatch):
    monkeypatch.setattr(passes_mod, "BRANCH_PASS_COST", 0)  # a trunk is worth keeping at any length
    rows = with_old_logprobs(model64, _two_task_rows(model64.config.vocab_size, seed=7), seed=8)
    packs = pack_rows(rows, "auto")
    kinds = {rows[p.segments[0].row].prompt_index: ("prefix" if p.branches is not None else "tree") for p in packs}
    # task 0: tree 8 + 2 x 6 + 4 x 3 = 32 tokens (+ 32^2 / 900 for its mask) against the prefix pack's trunk of 8
    # and four branches of 6 + 3 - 1 = 32 tokens in all; task 1: tree 9 + 3 x 4 = 21 (+ mask) against 9 + 3 x 3 = 18
    assert len(packs) == 2 and kinds == {0: "tree", 1: "prefix"}
    assert len(packs[0].ids) == 32 and packs[1].tokens == 18
    assert all(len({p.branches is None for p in mb}) == 1 for mb in micro_batches(packs, 100))
    algo = AlgoConfig(grad_noise_scale=False)
    want_loss, want = _reference_grads(model64, rows, algo)
    for pack in ("auto", "prefix", "tree"):
        res, got = _grads_by_sgd(model64, rows, algo.model_copy(update={"pack": pack}), 100)
        assert res.loss == pytest.approx(want_loss, abs=1e-9), pack
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w, atol=1e-7, rtol=0)


def test_branch_chunks_minimise_padding_plus_pass_cost_by_hand():
    lengths = [10, 2, 9, 3]  # longest first: 10 (0), 9 (2), 3 (3), 2 (1)
    # one pass: 4 x 10 + c; two passes {10, 9} {3, 2}: 2 x 10 + 2 x 3 + 2c; every branch alone: 24 + 4c
    assert branch_chunks(lengths, pass_cost=100) == [[0, 2, 3, 1]]      # 140 < 226
    # 36 < 40 (10 | 9 | 3 2) < 44 (each alone) < 45 (one pass)
    assert branch_chunks(lengths, pass_cost=5) == [[0, 2], [3, 1]]
    assert branch_chunks(lengths, pass_cost=0) == [[0], [2], [3], [1]]  # 24: no padding at all
    assert branch_chunks([], pass_cost=5) == []
    # a token cap: no run over 12 padded tokens unless one branch alone is longer
    assert branch_chunks([20, 6, 6], pass_cost=100, max_tokens=12) == [[0], [1, 2]]


@pytest.mark.parametrize("case", list(CASES))
def test_thread_shards_give_the_one_thread_update(model64, case, monkeypatch):
    """Micro-batches two at a time in thread shards: the same gradient, loss, per-role metrics and noise-scale
    and per-role clipping bookkeeping as running them one after the other (float64)."""
    algo = AlgoConfig(**CASES[case], grad_noise_scale=True)
    rows = with_old_logprobs(model64, chained_rows(model64.config.vocab_size, seed=1), seed=2)
    ref = copy.deepcopy(model64) if algo.use_kl else None
    if ref is not None:
        with torch.no_grad():
            for p in ref.parameters():
                p.add_(0.01)
    from envace.thread_shards import ShardRunner

    paired: list[int] = []
    real_map = ShardRunner.map
    monkeypatch.setattr(ShardRunner, "map",
                        lambda self, fn, items: paired.append(len(items)) or real_map(self, fn, items))
    for kw in ({}, {"clip_per_role": True}):
        one, g1 = _grads_by_sgd(model64, rows, algo, micro_batch=2, ref=ref, shards=1, **kw)
        assert not paired
        two, g2 = _grads_by_sgd(model64, rows, algo, micro_batch=2, ref=ref, shards=2, **kw)
        assert paired and set(paired) <= {1, 2} and 2 in paired  # micro-batches did run in pairs
        paired.clear()
        assert len(one.steps) == len(two.steps) and one.metrics["forward_tokens"] == two.metrics["forward_tokens"]
        assert two.loss == pytest.approx(one.loss, abs=1e-12) and two.grad_norm == pytest.approx(one.grad_norm, 1e-12)
        for role, m in one.role_metrics.items():
            assert two.role_metrics[role] == pytest.approx(m, abs=1e-12, nan_ok=True), role
        assert {k: v for k, v in two.metrics.items()} == pytest.approx(one.metrics, abs=1e-12, nan_ok=True)
        for a, b in zip(g1, g2):
            torch.testing.assert_close(b, a, atol=1e-12, rtol=1e-10)
