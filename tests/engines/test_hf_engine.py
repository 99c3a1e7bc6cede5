"""HFEngine on a tiny random Qwen3: log-probs match recomputation, seeds are per row, stops work and the
KV-cache loop equals a slow cache-free argmax loop."""

from __future__ import annotations

import pytest
import torch

from envace.engines.base import GenerationEngine, GenRequest
from envace.engines.hf import HFEngine, sample_rows
from envace.engines.logprobs import response_logprobs


@pytest.fixture(scope="module")
def engine(tiny_dir):
    return HFEngine.from_path(tiny_dir, device="cpu")


@pytest.fixture(scope="module")
def prompts(engine):
    tok = engine.tokenizer
    texts = ["How many apple?", "We received 12 boxes of pear, please add them. Then tell me the total.",
             "hi", '{"item": "rope", "qty": 7}']
    return [tok.apply_chat_template([{"role": "user", "content": t}], tokenize=False, add_generation_prompt=True)
            for t in texts]


def ids_of(engine, text):
    return engine.tokenizer.encode(text, add_special_tokens=False)


def test_is_a_generation_engine(engine):
    assert isinstance(engine, GenerationEngine)
    assert engine.stop_ids == {engine.tokenizer.eos_token_id, engine.tokenizer.pad_token_id}


def test_sampled_logprobs_equal_recomputed(engine, prompts):
    reqs = [GenRequest(ids_of(engine, prompts[0]), temperature=1.0, max_new_tokens=14, seed=1),
            GenRequest(ids_of(engine, prompts[1]), temperature=0.7, max_new_tokens=10, seed=2),
            GenRequest(ids_of(engine, prompts[2]), temperature=0.0, max_new_tokens=12),
            GenRequest(ids_of(engine, prompts[3]), temperature=1.3, top_p=0.8, max_new_tokens=9, seed=3)]
    out = engine.generate(reqs)
    assert [len(o.token_ids) for o in out] == [14, 10, 12, 9]  # a random model never says eos this early
    with torch.no_grad():
        lp, mask, _ = response_logprobs(engine.model, [r.prompt_ids for r in reqs], [o.token_ids for o in out],
                                        [r.temperature for r in reqs], engine.pad_id)
    for i, o in enumerate(out):
        n = len(o.token_ids)
        assert mask[i, :n].eq(1).all() and mask[i, n:].eq(0).all()
        assert torch.allclose(lp[i, :n], torch.tensor(o.logprobs), atol=1e-4, rtol=0), i
    # the T = 0.7 and T = 1.3 rows really were scored at their own temperature
    with torch.no_grad():
        lp_t1, _, _ = response_logprobs(engine.model, [reqs[1].prompt_ids], [out[1].token_ids], [1.0], engine.pad_id)
    assert not torch.allclose(lp_t1[0], torch.tensor(out[1].logprobs), atol=1e-3)


def test_seeded_rows_do_not_depend_on_batch(engine, prompts):
    req = GenRequest(ids_of(engine, prompts[1]), temperature=1.0, max_new_tokens=16, seed=123)
    alone = engine.generate([req])[0]
    again = engine.generate([req])[0]
    others = [GenRequest(ids_of(engine, p), temperature=t, max_new_tokens=m, seed=s)
              for p, t, m, s in [(prompts[0], 1.0, 3, 5), (prompts[2], 0.0, 20, None), (prompts[3], 0.5, 8, 9)]]
    mixed = engine.generate([others[0], req, others[1], others[2]])[1]
    assert alone.token_ids == again.token_ids == mixed.token_ids
    assert alone.logprobs == pytest.approx(mixed.logprobs, abs=1e-5)
    assert alone.meta["seed"] == 123
    other_seed = engine.generate([GenRequest(req.prompt_ids, temperature=1.0, max_new_tokens=16, seed=124)])[0]
    assert other_seed.token_ids != alone.token_ids
    chunked = HFEngine(engine.model, engine.tokenizer, device="cpu", max_batch=2)
    assert chunked.generate([others[0], req, others[1], others[2]])[1].token_ids == alone.token_ids


def slow_greedy(model, prompt, n):
    """Argmax continuation with a full forward pass per step and no cache."""
    ids = list(prompt)
    with torch.no_grad():
        for _ in range(n):
            logits = model(torch.tensor([ids]), use_cache=False).logits[0, -1]
            ids.append(int(logits.argmax()))
    return ids[len(prompt):]


def test_greedy_equals_cache_free_argmax_loop(engine, prompts):
    reqs = [GenRequest(ids_of(engine, p), temperature=0.0, max_new_tokens=12) for p in prompts]
    out = engine.generate(reqs)  # prompts of different lengths: left padding is exercised
    for r, o in zip(reqs, out):
        assert o.token_ids == slow_greedy(engine.model, r.prompt_ids, 12)
        assert o.finish_reason == "length"
        assert o.text == engine.tokenizer.decode(o.token_ids, skip_special_tokens=False)


def test_stop_string_keeps_text_and_stops_at_first_hit(engine, prompts):
    base = engine.generate([GenRequest(ids_of(engine, prompts[1]), temperature=0.0, max_new_tokens=20)])[0]
    full = engine.tokenizer.decode(base.token_ids)
    stop = full[len(full) // 2:len(full) // 2 + 3]
    # independent expectation: the shortest token prefix whose decoded text contains the stop string
    n = next(k for k in range(1, 21) if stop in engine.tokenizer.decode(base.token_ids[:k]))
    out = engine.generate([GenRequest(ids_of(engine, prompts[1]), temperature=0.0, max_new_tokens=20,
                                      stop=["never-there", stop])])[0]
    assert out.token_ids == base.token_ids[:n]
    assert out.finish_reason == "stop" and out.meta["stop"] == stop
    assert stop in out.text and out.text == engine.tokenizer.decode(base.token_ids[:n])


def test_eos_stops_and_is_left_out_of_text(tiny_dir, prompts):
    eng = HFEngine.from_path(tiny_dir, device="cpu")
    req = GenRequest(eng.tokenizer.encode(prompts[0], add_special_tokens=False), temperature=0.0, max_new_tokens=10)
    base = eng.generate([req])[0]
    # Treat the 4th greedy token as eos: the random model cannot be made to say <|im_end|> on cue.
    eng.stop_ids = eng.stop_ids | {base.token_ids[3]}
    first = base.token_ids.index(base.token_ids[3])
    out = eng.generate([req])[0]
    assert out.token_ids == base.token_ids[:first + 1] and out.finish_reason == "stop"
    assert out.text == eng.tokenizer.decode(base.token_ids[:first])


def test_bad_requests_are_named(engine):
    with pytest.raises(ValueError, match="request 1 has an empty prompt"):
        engine.generate([GenRequest([1, 2]), GenRequest([])])
    with pytest.raises(ValueError, match="request 0 has max_new_tokens=0"):
        engine.generate([GenRequest([1], max_new_tokens=0)])
    with pytest.raises(ValueError, match="top_p=0.0"):
        engine.generate([GenRequest([1], top_p=0.0)])


def slow_sample(logits_row, temperature, top_p, u):
    """Reference: probabilities at T; top_p = 1: inverse CDF on u in vocabulary order; otherwise kept set =
    most likely tokens until top_p mass, inverse CDF on u in descending order."""
    probs = torch.softmax(logits_row.double() / temperature, -1).tolist()
    if top_p >= 1.0:
        acc, total = 0.0, sum(probs)
        for j, p in enumerate(probs):
            acc += p
            if acc > u * total:
                return j
        return len(probs) - 1
    ranked = sorted(range(len(probs)), key=lambda j: (-probs[j], j))
    kept, mass = [], 0.0
    for j in ranked:
        if mass >= top_p:
            break
        kept.append(j)
        mass += probs[j]
    acc = 0.0
    for j in kept:
        acc += probs[j]
        if acc > u * mass:
            return j
    return kept[-1]


def test_sample_rows_matches_reference():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(64, 50, generator=g) * 3
    temps = [0.0 if i % 5 == 0 else 0.3 + (i % 4) * 0.4 for i in range(64)]
    top_ps = [1.0 if i % 3 == 0 else 0.05 + 0.3 * (i % 3) for i in range(64)]
    us = [None if t == 0.0 else float(torch.rand((), generator=g)) for t in temps]
    tokens, lps = sample_rows(logits, temps, top_ps, us)
    for i in range(64):
        t = temps[i] or 1.0
        want = int(logits[i].argmax()) if temps[i] == 0.0 else slow_sample(logits[i], t, top_ps[i], us[i])
        assert int(tokens[i]) == want, i
        assert float(lps[i]) == pytest.approx(float(torch.log_softmax(logits[i] / t, -1)[want]), abs=1e-6)
