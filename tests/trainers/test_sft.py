"""`envace sft`: packed Act samples are exactly the per-message samples (same tokens, same context,
same losses), batches hold one role, and training lowers the loss on both roles' targets."""

from __future__ import annotations

import copy
import random

import pytest
import torch

from envace.data.config import DataConfig
from envace.models.loading import load_policy
from envace.trainers.config import SFTConfig
from envace.trainers.packing import shared_prefix_packs
from envace.trainers.sft import BatchDrawer, batch_loss, collate, sft
from envace.trainers.sft_samples import Sample, act_samples, build_samples, packed_act_sample
from envace.types import Role
from envace.worlds.generator import generate_tasks


@pytest.fixture(scope="module")
def tasks():
    return generate_tasks(18, "train", 3)  # every (domain, shape) once: single-, multi-call and two-turn


@pytest.fixture(scope="module")
def tok(tiny_model_dir):
    return load_policy(tiny_model_dir)[1]


def test_packed_sample_holds_every_per_message_sample_at_its_position(tasks, tok):
    multi = 0
    for task in tasks:
        packed = packed_act_sample(task, tok)
        assert packed is not None, task.uuid
        singles = act_samples(task, tok)
        multi += len(singles) > 1
        expected_targets = set()
        for s in singles:
            n_prompt = s.is_target.index(True)
            assert packed.ids[: len(s.ids)] == s.ids  # the prompt and the target, at the same positions
            expected_targets |= set(range(n_prompt, len(s.ids)))
        assert {i for i, t in enumerate(packed.is_target) if t} == expected_targets
        assert len(packed.ids) == len(singles[-1].ids)  # the last message ends the conversation
    assert multi >= 12  # most shapes have several assistant messages


def test_a_template_that_rewrites_earlier_turns_falls_back_to_per_message_samples(tasks, tok):
    """A template that renders an assistant turn differently once later messages follow it (as Qwen3 drops
    earlier thinking): a later prompt does not begin with the packed ids, so the task gets one sample per
    assistant message, each with its own prompt."""
    rewriting = copy.deepcopy(tok)
    turn = "{{- '<|im_start|>assistant\\n' + content -}}"
    assert turn in rewriting.chat_template
    rewriting.chat_template = rewriting.chat_template.replace(
        turn, "{{- '<|im_start|>assistant\\n' + ('' if loop.last else 'earlier ') + content -}}")
    multi = [t for t in tasks if sum(m.role == "assistant" for m in t.messages) > 1]
    assert len(multi) == len(tasks)
    assert all(packed_act_sample(t, rewriting) is None for t in multi)
    assert all(packed_act_sample(t, tok) is not None for t in multi)
    acts, _ = build_samples(multi[:3], rewriting, SFTConfig(model="m", tts_prompts=0))
    singles = [s for t in multi[:3] for s in act_samples(t, rewriting)]
    assert [s.ids for s in acts] == [s.ids for s in singles]
    assert any("earlier " in rewriting.decode(s.ids) for s in singles)


def test_packed_and_per_message_losses_agree(tasks, tiny_model_dir, tok):
    """Same context for every target token: the model's per-token losses are equal."""
    model, _ = load_policy(tiny_model_dir)
    model.eval()

    def token_losses(sample: Sample) -> list[float]:
        ids, att, labels = collate([sample], tok.pad_token_id)
        with torch.no_grad():
            logits = model(input_ids=ids, attention_mask=att).logits[0, :-1]
        lab = labels[0, 1:]
        keep = lab != -100
        return torch.nn.functional.cross_entropy(logits[keep], lab[keep], reduction="none").tolist()

    for task in tasks[:6]:
        packed = token_losses(packed_act_sample(task, tok))
        singles = [x for s in act_samples(task, tok) for x in token_losses(s)]
        assert packed == pytest.approx(singles, abs=1e-4)


def test_shared_prefix_loss_equals_the_per_sample_loop(tasks, tiny_model_dir, tok):
    """The batch's common prefix run once (and each domain's longer one where the batch holds several:
    system prompt and tools), sequences in length-sorted passes, the output layer at targets only: the same
    token-mean loss, per-sample losses and gradients as one padded full-logits forward and as a loop over
    unpadded samples (float64)."""
    model = load_policy(tiny_model_dir)[0].double()
    acts, rehs = build_samples(tasks, tok, SFTConfig(model="m"))
    for batch in (acts[:7], rehs[:9], acts):
        reads = [[j - 1 for j, t in enumerate(s.is_target) if t] for s in batch]
        packs = shared_prefix_packs([s.ids for s in batch], reads, batch[0].role)
        assert sum(p.tokens for p in packs) < len(batch) * max(len(s.ids) for s in batch)  # fewer tokens run
        if batch is acts:  # three domains: three trunks, one per system prompt
            assert len(packs) == 3 and all(len(p.ids) > 100 for p in packs)
        # the loop: each sample alone, summed token losses over all targets
        model.zero_grad()
        total, n, want_rows = 0.0, 0, []
        for s in batch:
            logits = model(input_ids=torch.tensor([s.ids])).logits[0]
            lp = torch.log_softmax(logits, -1)
            nll = [-lp[j - 1, s.ids[j]] for j, t in enumerate(s.is_target) if t]
            total = total + torch.stack(nll).sum()
            n += len(nll)
            want_rows.append(float(torch.stack(nll).mean()))
        (total / n).backward()
        want = [p.grad.clone() for p in model.parameters()]
        for share in (True, False):
            model.zero_grad()
            loss, rows = batch_loss(model, batch, tok.pad_token_id, share)
            loss.backward()
            assert float(loss) == pytest.approx(float(total / n), abs=1e-9), share
            assert rows == pytest.approx(want_rows, abs=1e-9), share
            for g, w in zip((p.grad for p in model.parameters()), want):
                torch.testing.assert_close(g, w, atol=1e-7, rtol=0)


def test_build_samples_packs_or_not(tasks, tok):
    packed, rehs = build_samples(tasks, tok, SFTConfig(model="m"))
    single, rehs2 = build_samples(tasks, tok, SFTConfig(model="m", pack_act=False))
    assert len(packed) == len(tasks)
    assert len(single) == sum(len(act_samples(t, tok)) for t in tasks)
    assert sum(s.n_target for s in packed) == sum(s.n_target for s in single)
    assert sum(len(s.ids) for s in packed) < 0.7 * sum(len(s.ids) for s in single)
    assert len(rehs) == len(rehs2) == sum(len(m.tool_calls) for t in tasks for m in t.messages)
    assert all(s.role is Role.REHEARSE for s in rehs)


def test_collate_labels_only_targets():
    s = Sample(Role.ACT, [5, 6, 7, 8], [False, True, False, True])
    ids, att, labels = collate([s, Sample.of(Role.REHEARSE, [9], [3])], pad_id=0)
    assert ids.tolist() == [[5, 6, 7, 8], [9, 3, 0, 0]]
    assert att.tolist() == [[1, 1, 1, 1], [1, 1, 0, 0]]
    assert labels.tolist() == [[-100, 6, -100, 8], [-100, 3, -100, -100]]


@pytest.mark.parametrize("groups", [1, 5])
def test_batches_hold_one_role_at_the_configured_rate(groups):
    acts = [Sample.of(Role.ACT, [1], [2])]
    rehs = [Sample.of(Role.REHEARSE, [1], [2])]
    cfg = SFTConfig(model="m", act_fraction=0.25, batch_size=4, length_groups=groups)
    draw = BatchDrawer(acts, rehs, cfg, random.Random(0))
    batches = [draw() for _ in range(2000)]
    assert all(len({s.role for s in b}) == 1 and len(b) == 4 for b in batches)
    share = sum(b[0].role is Role.ACT for b in batches) / len(batches)
    assert 0.21 < share < 0.29
    assert {s.role for s in BatchDrawer(acts, [], cfg, random.Random(0))()} == {Role.ACT}
    assert {s.role for s in BatchDrawer([], rehs, cfg, random.Random(0))()} == {Role.REHEARSE}


def test_length_groups_pad_less_and_draw_every_sample_alike():
    """Ten Act samples of lengths 2..11: grouped batches of 2 from groups of 5 batches hold near lengths
    (each batch's spread is small against the ungrouped one), and over many draws every sample is drawn
    about equally often (a uniform draw, only the grouping differs)."""
    acts = [Sample.of(Role.ACT, [1] * n, [2]) for n in range(1, 11)]
    spread = {}
    counts = {}
    for groups in (1, 5):
        cfg = SFTConfig(model="m", act_fraction=1.0, batch_size=2, length_groups=groups)
        draw = BatchDrawer(acts, [], cfg, random.Random(1))
        batches = [draw() for _ in range(5000)]
        spread[groups] = sum(max(len(s.ids) for s in b) - min(len(s.ids) for s in b) for b in batches) / len(batches)
        counts[groups] = [sum(s is a for b in batches for s in b) for a in acts]
    assert spread[5] < 0.6 * spread[1]  # hand-worked: 3.3 ungrouped (E|X - Y| over 10 values), ~1.2 grouped
    assert 3.0 < spread[1] < 3.6
    for n in counts[5]:
        assert abs(n - 1000) < 120  # 10,000 draws over 10 samples


def test_sft_lowers_both_roles_target_loss(tiny_model_dir, tmp_path, tok):
    held = generate_tasks(9, "val", 0)
    acts, rehs = build_samples(held, tok, SFTConfig(model="m"))

    def mean_loss(model_dir) -> dict[str, float]:
        model, _ = load_policy(model_dir)
        model.eval()
        out = {}
        for name, samples in (("act", acts), ("rehearse", rehs)):
            ids, att, labels = collate(samples, tok.pad_token_id)
            with torch.no_grad():
                logits = model(input_ids=ids, attention_mask=att).logits[:, :-1]
            out[name] = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                                          labels[:, 1:].reshape(-1), ignore_index=-100).item()
        return out

    before = mean_loss(tiny_model_dir)
    summary = sft(SFTConfig(model=str(tiny_model_dir), out_dir=str(tmp_path / "sft"), steps=40, batch_size=8,
                            lr=3e-3, warmup_steps=5, progress=False, data=DataConfig(n_tasks=60, seed=0)))
    after = mean_loss(summary["model_dir"])
    assert summary["steps"] == 40
    assert after["act"] < before["act"] - 1.0 and after["rehearse"] < before["rehearse"] - 1.0, (before, after)


def test_fused_norms_train_as_transformers_norms(tiny_model_dir, tmp_path):
    """SFT with the hand-written norm backward (envace.models.rms_norm) against transformers' norms: the same
    run up to float rounding, not bit for bit (the swap is in use)."""
    runs = {}
    for fused in (True, False):
        summary = sft(SFTConfig(model=str(tiny_model_dir), out_dir=str(tmp_path / f"sft-{fused}"), steps=4,
                                batch_size=8, lr=3e-3, warmup_steps=1, progress=False, shards=1, fused_norm=fused,
                                data=DataConfig(n_tasks=20, seed=0)))
        model, _ = load_policy(summary["model_dir"])
        runs[fused] = {name: p.detach() for name, p in model.named_parameters()}
    start, _ = load_policy(tiny_model_dir)
    moved = max(float((runs[False][n] - p.detach()).abs().max()) for n, p in start.named_parameters())
    apart = max(float((runs[True][n] - runs[False][n]).abs().max()) for n in runs[False])
    assert 0 < apart < 1e-2 * moved, (apart, moved)
