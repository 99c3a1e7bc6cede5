"""FastEngine on a tiny random Qwen3 and a tiny random Llama (the SmolLM2 family: no q/k norms, tied
embeddings) against HFEngine (the reference) and against the trainer's log-prob recomputation; the sampling
convention against slow loops; the engine factory."""

from __future__ import annotations

import pytest
import torch

from envace.engines.base import GenerationEngine, GenRequest
from envace.engines.factory import engine_name, make_engine
from envace.engines.fast import FastEngine
from envace.engines.fast_sampling import TOPK_SLICE, row_uniforms, sample_tokens
from envace.engines.hf import HFEngine
from envace.engines.kv_cache import TrunkIndex
from envace.engines.logprobs import response_logprobs
from envace.models.loading import load_policy
from envace.rollout.machine import ACT_STOP, REHEARSE_STOP


def llama_like(tiny_dir, out):
    """A random-init LlamaForCausalLM shaped like SmolLM2 (grouped-query attention, tied embeddings, RoPE base
    1e5, no biases) on the tiny model's tokenizer, saved as an ordinary model dir."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from envace.models.loading import save_model

    qwen, tok = load_policy(tiny_dir, device="cpu")
    q = qwen.config
    cfg = LlamaConfig(vocab_size=q.vocab_size, hidden_size=96, intermediate_size=256, num_hidden_layers=2,
                      num_attention_heads=6, num_key_value_heads=2, max_position_embeddings=q.max_position_embeddings,
                      rope_theta=100000.0, tie_word_embeddings=True, pad_token_id=q.pad_token_id, bos_token_id=None,
                      eos_token_id=q.eos_token_id)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(3)
        model = LlamaForCausalLM(cfg).float().eval()
    model.generation_config = qwen.generation_config
    return save_model(model, tok, out)


@pytest.fixture(scope="module", params=["qwen3", "llama"])
def model_dir(request, tiny_dir, tmp_path_factory):
    if request.param == "qwen3":
        return tiny_dir
    return llama_like(tiny_dir, tmp_path_factory.mktemp("llama") / "model")


@pytest.fixture(scope="module")
def pair(model_dir):
    """A fast and an HF engine over the SAME model object (a perturbation is seen by both)."""
    model, tok = load_policy(model_dir, device="cpu")
    return FastEngine(model, tok, device="cpu"), HFEngine(model, tok, device="cpu")


@pytest.fixture(scope="module")
def varied(model_dir):
    """Engines over a perturbed copy of the model: the random init only ever repeats one token."""
    model, tok = load_policy(model_dir, device="cpu")
    g = torch.Generator().manual_seed(5)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.1)
    return FastEngine(model, tok, device="cpu"), HFEngine(model, tok, device="cpu")


def chat_ids(tok, text: str, extra: str = "") -> list[int]:
    msgs = [{"role": "user", "content": text}]
    return tok.encode(tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True) + extra,
                      add_special_tokens=False)


TEXTS = ["How many apple?", "We received 12 boxes of pear, please add them. Then tell me the total of all stock.",
         "hi", '{"item": "rope", "qty": 7}', "Done: nail stock is now 40. Anything else about salt or tape?"]


@pytest.fixture(scope="module")
def prompts(pair):
    tok = pair[0].tokenizer
    out = [chat_ids(tok, t) for t in TEXTS]
    assert len({len(p) for p in out}) == len(out)  # varied lengths: left alignment is exercised
    return out


def same_results(a, b, lp_tol=1e-5):
    assert [x.token_ids for x in a] == [y.token_ids for y in b]
    assert [(x.text, x.finish_reason, x.meta) for x in a] == [(y.text, y.finish_reason, y.meta) for y in b]
    for x, y in zip(a, b):
        assert x.logprobs == pytest.approx(y.logprobs, abs=lp_tol)


def test_is_a_generation_engine_with_a_name(pair):
    fast, hf = pair
    assert isinstance(fast, GenerationEngine)
    assert (engine_name(fast), engine_name(hf)) == ("fast", "hf")
    assert fast.stop_ids == hf.stop_ids


def test_greedy_equals_hf_on_random_and_perturbed_model(pair, prompts):
    fast, hf = pair
    reqs = [GenRequest(p, temperature=0.0, max_new_tokens=16, seed=i) for i, p in enumerate(prompts)]
    same_results(fast.generate(reqs), hf.generate(reqs))
    before = fast.generate(reqs)
    g = torch.Generator().manual_seed(5)
    saved = {n: p.detach().clone() for n, p in fast.model.named_parameters()}
    try:
        with torch.no_grad():  # in place, after the engine was built: the fused weights must follow
            for p in fast.model.parameters():
                p.add_(torch.randn(p.shape, generator=g) * 0.1)
        after = fast.generate(reqs)
        assert [o.token_ids for o in after] != [o.token_ids for o in before]
        assert len({t for o in after for t in o.token_ids}) > 10  # a varied continuation, not one repeated id
        same_results(after, hf.generate(reqs))
    finally:
        with torch.no_grad():
            for n, p in fast.model.named_parameters():
                p.copy_(saved[n])
    assert [o.token_ids for o in fast.generate(reqs)] == [o.token_ids for o in before]


@pytest.mark.parametrize("temperature", [1.0, 0.7, 0.0])
def test_sampled_logprobs_equal_recomputation_for_both_roles(varied, prompts, temperature):
    fast, hf = varied
    tok = fast.tokenizer
    act = [GenRequest(p, temperature=temperature, max_new_tokens=12, stop=list(ACT_STOP), seed=10 + i)
           for i, p in enumerate(prompts)]
    rehearse = [GenRequest(chat_ids(tok, t, "<tool_response>\n"), temperature=temperature, max_new_tokens=10,
                           stop=list(REHEARSE_STOP), seed=20 + i) for i, t in enumerate(TEXTS[:3])]
    for reqs in (act, rehearse):
        out = fast.generate(reqs)
        with torch.no_grad():
            lp, mask, _ = response_logprobs(fast.model, [r.prompt_ids for r in reqs], [o.token_ids for o in out],
                                            [r.temperature for r in reqs], fast.pad_id)
        for i, o in enumerate(out):
            n = len(o.token_ids)
            assert n > 0 and mask[i, :n].eq(1).all()
            assert torch.allclose(lp[i, :n], torch.tensor(o.logprobs), atol=1e-4, rtol=0), i
        # the same seeds give the same tokens in the reference engine
        same_results(out, hf.generate(reqs), lp_tol=1e-4)


def test_same_seed_same_tokens_alone_or_in_any_batch(varied, prompts):
    fast, _ = varied
    req = GenRequest(prompts[1], temperature=1.0, max_new_tokens=16, seed=123)
    alone = fast.generate([req])[0]
    # short rows finish early, so the batch is compacted around the seeded row mid-generation
    others = [GenRequest(p, temperature=t, top_p=tp, max_new_tokens=m, seed=s)
              for p, t, tp, m, s in [(prompts[0], 1.0, 1.0, 2, 5), (prompts[2], 0.0, 1.0, 3, None),
                                     (prompts[3], 0.5, 0.8, 1, 9), (prompts[4], 1.3, 1.0, 4, 7)]]
    mixed = fast.generate([others[0], req, *others[1:]])
    assert alone.token_ids == mixed[1].token_ids
    assert alone.logprobs == pytest.approx(mixed[1].logprobs, abs=1e-5)
    assert [len(o.token_ids) for o in mixed] == [2, 16, 3, 1, 4]
    chunked = FastEngine(fast.model, fast.tokenizer, device="cpu", max_batch=2, prefill_tokens=1)
    assert chunked.generate([others[0], req, *others[1:]])[1].token_ids == alone.token_ids
    assert fast.generate([GenRequest(req.prompt_ids, temperature=1.0, max_new_tokens=16, seed=124)])[0].token_ids \
        != alone.token_ids


def test_repeated_prompts_are_prefilled_once_with_the_same_results(varied, prompts, monkeypatch):
    fast, _ = varied
    # a task's K samples share their prompt; two tasks interleaved, one greedy copy among them
    reqs = [GenRequest(prompts[i], temperature=t, max_new_tokens=10, seed=s)
            for i, t, s in [(1, 1.0, 1), (3, 1.0, 2), (1, 1.0, 3), (1, 0.0, 0), (3, 0.8, 4), (4, 1.0, 5)]]
    alone = [fast.generate([r])[0] for r in reqs]
    prefilled: list[list[int]] = []
    real = fast.kernel.prefill

    def spy(cache, rows, chunk, width):
        prefilled.extend(chunk)
        return real(cache, rows, chunk, width)

    monkeypatch.setattr(fast.kernel, "prefill", spy)
    batch = fast.generate(reqs)
    assert sorted(map(tuple, prefilled)) == sorted({tuple(prompts[i]) for i in (1, 3, 4)})
    same_results(batch, alone)
    assert batch[0].token_ids != batch[2].token_ids  # copies of one prompt still sample their own tokens


@pytest.mark.parametrize("share", [True, False], ids=["trunk", "row-copies"])
def test_rows_of_a_shared_prompt_decode_as_they_would_alone(varied, prompts, share):
    fast, hf = varied
    engine = FastEngine(fast.model, fast.tokenizer, device="cpu", share_prompts=share)
    # copies of a prompt that stop at different steps: the batch is compacted while the rest of their trunk
    # row keeps decoding, and a prompt whose copies all finished leaves the trunk
    reqs = [GenRequest(prompts[i], temperature=t, max_new_tokens=m, seed=s)
            for i, t, m, s in [(1, 1.0, 2, 1), (3, 1.0, 12, 2), (1, 1.0, 16, 3), (1, 0.0, 5, 0), (3, 0.8, 1, 4),
                               (4, 1.0, 3, 5), (1, 1.3, 16, 6), (4, 1.0, 2, 7)]]
    alone = [engine.generate([r])[0] for r in reqs]
    calls = {"decode": 0, "decode_shared": 0}
    for name in calls:
        real = getattr(engine.kernel, name)

        def spy(*a, _real=real, _name=name):
            calls[_name] += 1
            return _real(*a)

        setattr(engine.kernel, name, spy)
    batch = engine.generate(reqs)
    assert (calls["decode_shared"] > 0, calls["decode"] > 0) == (share, not share)
    same_results(batch, alone)
    assert len({len(o.token_ids) for o in batch}) >= 4  # rows finished at several steps: compacted mid-call
    same_results(batch, hf.generate(reqs), lp_tol=1e-4)


def test_rows_in_prompt_order_decode_as_they_would_alone(varied, prompts):
    """A GRPO-shaped batch: each prompt's rows together, one prompt with twice the rows of the others. Its
    rows take two trunk rows of the common size, and every step runs on the regular layout (no slot
    scatter) until rows finish at different steps."""
    fast, hf = varied
    reqs = [GenRequest(prompts[i], temperature=1.0, max_new_tokens=m, seed=s)
            for s, (i, m) in enumerate([(1, 8), (1, 3), (1, 8), (1, 8), (3, 8), (3, 8), (4, 8), (4, 5)])]
    alone = [fast.generate([r])[0] for r in reqs]
    layouts = []
    real = fast.kernel.decode_shared

    def spy(trunk, cache, index, *a):
        layouts.append((index.n_groups, index.slots, index.regular))
        return real(trunk, cache, index, *a)

    fast.kernel.decode_shared = spy
    try:
        batch = fast.generate(reqs)
    finally:
        del fast.kernel.decode_shared
    assert layouts[0] == (4, 2, True)  # prompt 1's four rows in two trunk rows
    same_results(batch, alone)
    same_results(batch, hf.generate(reqs), lp_tol=1e-4)


@pytest.mark.parametrize("prompt_of_row, groups, slots, prompt_of_trunk_row, regular", [
    ([0] * 8 + [1] * 16 + [2] * 8, [0] * 8 + [1] * 8 + [2] * 8 + [3] * 8, [*range(8)] * 4, [0, 1, 1, 2], True),
    ([0, 1, 0, 1, 2, 2, 2], [0, 1, 0, 1, 2, 2, 3], [0, 0, 1, 1, 0, 1, 0], [0, 1, 2, 2], False),
    ([0, 0, 0, 1], [0, 0, 0, 1], [0, 1, 2, 0], [0, 1], False),
])
def test_trunk_rows_are_balanced_by_hand(prompt_of_row, groups, slots, prompt_of_trunk_row, regular):
    index, of_trunk_row = TrunkIndex.balanced(prompt_of_row, max(prompt_of_row) + 1, "cpu")
    assert index.group.tolist() == groups and index.slot.tolist() == slots
    assert of_trunk_row == prompt_of_trunk_row and index.regular == regular
    assert index.slots == max(slots) + 1 and index.n_groups == len(prompt_of_trunk_row)


def test_stop_strings_max_new_tokens_and_eos_behave_as_hf(varied, prompts):
    fast, hf = varied
    tok = fast.tokenizer
    base = hf.generate([GenRequest(prompts[1], temperature=0.0, max_new_tokens=24, seed=0)])[0]
    full = tok.decode(base.token_ids)
    stops = [full[k:k + 3] for k in (2, len(full) // 2, len(full) - 4)] + [full[-9:]]
    reqs = [GenRequest(prompts[1], temperature=0.0, max_new_tokens=24, stop=["never-there", s], seed=0) for s in stops]
    reqs += [GenRequest(prompts[1], temperature=0.0, max_new_tokens=5, stop=[full[-3:]], seed=0)]
    out = fast.generate(reqs)
    same_results(out, hf.generate(reqs))
    assert [o.finish_reason for o in out] == ["stop"] * 4 + ["length"]
    for s, o in zip(stops, out):  # independent expectation: the shortest prefix whose decode holds s
        n = next(k for k in range(1, 25) if s in tok.decode(base.token_ids[:k]))
        assert o.token_ids == base.token_ids[:n] and o.meta["stop"] == s

    eos = base.token_ids[3]
    saved = set(fast.stop_ids)
    fast.stop_ids, hf.stop_ids = saved | {eos}, saved | {eos}
    try:
        reqs = [GenRequest(prompts[1], temperature=0.0, max_new_tokens=10, seed=0),
                GenRequest(prompts[0], temperature=1.0, max_new_tokens=10, seed=3)]
        out = fast.generate(reqs)
        same_results(out, hf.generate(reqs))
        first = base.token_ids.index(eos)
        assert out[0].token_ids == base.token_ids[:first + 1] and out[0].finish_reason == "stop"
        assert out[0].text == tok.decode(base.token_ids[:first])
    finally:
        fast.stop_ids, hf.stop_ids = saved, set(saved)


def test_bad_requests_are_named(pair):
    fast, _ = pair
    with pytest.raises(ValueError, match="request 1 has an empty prompt"):
        fast.generate([GenRequest([1, 2]), GenRequest([])])
    with pytest.raises(ValueError, match="request 0 has max_new_tokens=0"):
        fast.generate([GenRequest([1], max_new_tokens=0)])
    with pytest.raises(ValueError, match="top_p=0.0"):
        fast.generate([GenRequest([1], top_p=0.0)])


# ----- sampling convention against slow loops ------------------------------------------------------------

def slow_pick(logits_row, temperature, top_p, u):
    """top_p = 1: walk ids 0..V-1 summing probabilities until the sum exceeds u * total. top_p < 1: rank by
    (probability desc, id asc), keep the smallest prefix reaching top_p mass, walk it until u * kept mass."""
    probs = torch.softmax(logits_row.double() / temperature, -1).tolist()
    ranked = list(range(len(probs))) if top_p >= 1.0 else sorted(range(len(probs)), key=lambda j: (-probs[j], j))
    kept, mass = [], 0.0
    for j in ranked:
        if top_p < 1.0 and mass >= top_p:
            break
        kept.append(j)
        mass += probs[j]
    acc = 0.0
    for j in kept:
        acc += probs[j]
        if acc > u * mass:
            return j
    return kept[-1]


def run_sample(logits, temps, top_ps, us):
    greedy = [t == 0.0 for t in temps]
    return sample_tokens(logits, torch.tensor([t or 1.0 for t in temps]), torch.tensor(greedy),
                         torch.tensor(top_ps, dtype=torch.float64), torch.tensor(us, dtype=torch.float64),
                         any_greedy=any(greedy), any_nucleus=any(p < 1 for p in top_ps))


@pytest.mark.parametrize("shape", ["peaked", "flat", "ties"])
def test_sample_tokens_match_slow_loops(shape):
    g = torch.Generator().manual_seed(1)
    n, v = 48, 300
    logits = torch.randn(n, v, generator=g) * (4.0 if shape == "peaked" else 0.3)
    if shape == "ties":  # equal logits around the top-k slice edge and inside it
        logits = torch.randint(0, 6, (n, v), generator=g).float()
    temps = [0.0 if i % 6 == 0 else 0.5 + (i % 3) * 0.4 for i in range(n)]
    # 0.999 on flat rows forces the nucleus past the top-k slice (the full-sort fallback)
    top_ps = [1.0 if i % 2 else (0.3, 0.9, 0.999)[i % 3] for i in range(n)]
    us = [float(x) for x in torch.rand(n, generator=g, dtype=torch.float64)]
    tokens, lps = run_sample(logits, temps, top_ps, us)
    for i in range(n):
        t = temps[i] or 1.0
        want = int(logits[i].argmax()) if temps[i] == 0.0 else slow_pick(logits[i], t, top_ps[i], us[i])
        assert int(tokens[i]) == want, i
        assert float(lps[i]) == pytest.approx(float(torch.log_softmax(logits[i] / t, -1)[want]), abs=1e-5)
    assert v > TOPK_SLICE


def test_sampling_at_temperature_one_skips_only_a_division_by_one():
    g = torch.Generator().manual_seed(2)
    logits = torch.randn(16, 300, generator=g) * 3
    ones, u = torch.ones(16), torch.rand(16, generator=g, dtype=torch.float64)
    args = (logits, ones, torch.zeros(16, dtype=torch.bool), torch.ones(16, dtype=torch.float64), u)
    divided = sample_tokens(*args, any_greedy=False, any_nucleus=False, any_temperature=True)
    skipped = sample_tokens(*args, any_greedy=False, any_nucleus=False, any_temperature=False)
    assert torch.equal(divided[0], skipped[0]) and torch.equal(divided[1], skipped[1])


def test_top_p_one_inverse_cdf_is_the_distribution():
    """Vocabulary-order inverse CDF: over many uniforms the token frequencies follow softmax(logits / T)."""
    logits = torch.tensor([[2.0, 0.0, 1.0, -1.0, 0.5]])
    u = row_uniforms(0, 20000).double()
    tokens, _ = run_sample(logits.expand(len(u), -1).contiguous(), [0.8] * len(u), [1.0] * len(u), u.tolist())
    freq = torch.bincount(tokens, minlength=5).double() / len(u)
    assert torch.allclose(freq, torch.softmax(logits[0].double() / 0.8, -1), atol=0.01)


def test_row_uniforms_are_the_one_draw_per_token_stream():
    gen = torch.Generator().manual_seed(42)
    assert row_uniforms(42, 7).tolist() == [float(torch.rand((), generator=gen)) for _ in range(7)]


# ----- factory ---------------------------------------------------------------------------------------------

def test_factory_picks_fast_for_qwen3_and_llama_and_hf_otherwise(pair, monkeypatch):
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

    fast, _ = pair
    monkeypatch.delenv("ENVACE_ENGINE", raising=False)
    assert isinstance(make_engine(fast.model, fast.tokenizer, "cpu"), FastEngine)
    assert isinstance(make_engine(fast.model, fast.tokenizer, "cpu", kind="hf"), HFEngine)
    monkeypatch.setenv("ENVACE_ENGINE", "hf")
    assert engine_name(make_engine(fast.model, fast.tokenizer, "cpu")) == "hf"
    monkeypatch.delenv("ENVACE_ENGINE")
    small = {"vocab_size": fast.model.config.vocab_size, "hidden_size": 32, "intermediate_size": 64,
             "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1}
    assert isinstance(make_engine(LlamaForCausalLM(LlamaConfig(**small)).eval(), fast.tokenizer, "cpu"), FastEngine)
    gpt2 = GPT2LMHeadModel(GPT2Config(vocab_size=small["vocab_size"], n_embd=32, n_layer=1, n_head=2)).eval()
    biased = LlamaForCausalLM(LlamaConfig(**small, attention_bias=True)).eval()
    scaled = LlamaForCausalLM(LlamaConfig(**small, rope_scaling={"rope_type": "linear", "factor": 2.0})).eval()
    for model, reason in [(gpt2, "architecture 'gpt2' is not one of qwen3, llama"),
                          (biased, "attention projections have biases"), (scaled, "rope type 'linear'")]:
        assert isinstance(make_engine(model, fast.tokenizer, "cpu"), HFEngine)
        with pytest.raises(ValueError, match=reason):
            make_engine(model, fast.tokenizer, "cpu", kind="fast")
    with pytest.raises(ValueError, match="must be auto, fast or hf"):
        make_engine(gpt2, fast.tokenizer, "cpu", kind="vllm")


def test_engine_names_are_run_params(tmp_path):
    """The trainer records which engine ran each model (real MLflow SQLite store); a resume keeps them."""
    from mlflow.tracking import MlflowClient

    from envace.trainers.config import TrainConfig
    from envace.trainers.run_tracker import RunTracker

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    cfg = TrainConfig.model_validate({"model": str(tmp_path / "unused-model"), "out_dir": str(tmp_path / "run"),
                                      "tracking": {"mlflow_uri": uri, "store_url": str(tmp_path / "store.db")}})
    tracker = RunTracker(cfg)
    try:
        tracker.log_engines({"act": "fast", "rehearse": "hf"})
        tracker.log_engines({"act": "hf"})  # params are immutable: the first value stays, the tag follows
    finally:
        tracker.close()
    run = MlflowClient(uri).get_run(tracker.mlflow_run_id)
    assert (run.data.params["engine.act"], run.data.params["engine.rehearse"]) == ("fast", "hf")
    assert run.data.tags["envace.engine"] == "act=hf"


def test_positions_past_the_configured_context_match_hf(varied, prompts):
    """RoPE positions beyond max_position_embeddings (the table grows from the model's rotary module)."""
    fast, hf = varied
    n = fast.model.config.max_position_embeddings + 5
    long_prompt = (prompts[1] * (n // len(prompts[1]) + 1))[:n]
    reqs = [GenRequest(long_prompt, temperature=0.0, max_new_tokens=6, seed=0),
            GenRequest(prompts[0], temperature=1.0, max_new_tokens=6, seed=1)]
    same_results(fast.generate(reqs), hf.generate(reqs), lp_tol=1e-4)


def test_thread_shards_give_each_request_what_it_gets_unsharded(varied, prompts, monkeypatch):
    """On CPU at several threads a call is cut into thread shards: every request's tokens and log-probs are
    the one-shard call's, a prompt's copies stay in one shard (prefilled once), the shards run in pool
    threads, and seedless requests are reproducible under torch.manual_seed."""
    import threading

    fast, _ = varied
    reqs = [GenRequest(prompts[i], temperature=t, top_p=tp, max_new_tokens=m, seed=s, stop=stop)
            for i, t, tp, m, s, stop in [(1, 1.0, 1.0, 12, 1, []), (3, 1.0, 1.0, 9, 2, []), (1, 1.0, 1.0, 12, 3, []),
                                         (1, 0.0, 1.0, 12, 0, []), (3, 0.8, 0.9, 9, 4, []), (4, 1.0, 1.0, 5, 5, []),
                                         (0, 1.2, 1.0, 16, 6, list(ACT_STOP)), (2, 1.0, 1.0, 7, 7, [])]]
    one = FastEngine(fast.model, fast.tokenizer, device="cpu", shards=1).generate(reqs)
    sharded = FastEngine(fast.model, fast.tokenizer, device="cpu", shards=3)
    prefilled: list[tuple[str, tuple[int, ...]]] = []
    real = sharded.kernel.prefill

    def spy(cache, rows, chunk, width):
        prefilled.extend((threading.current_thread().name, tuple(p)) for p in chunk)
        return real(cache, rows, chunk, width)

    monkeypatch.setattr(sharded.kernel, "prefill", spy)
    same_results(sharded.generate(reqs), one)
    assert sorted(p for _, p in prefilled) == sorted({tuple(r.prompt_ids) for r in reqs})  # each prompt once
    # every shard ran in the pool (a pool thread that finished early may take the next shard too)
    assert all(name.startswith("envace-shard") for name, _ in prefilled)
    seedless = [GenRequest(r.prompt_ids, temperature=1.0, max_new_tokens=8) for r in reqs]
    torch.manual_seed(11)
    first = sharded.generate(seedless)
    torch.manual_seed(11)
    assert [r.token_ids for r in sharded.generate(seedless)] == [r.token_ids for r in first]
    with pytest.raises(ValueError, match="request 5 has max_new_tokens=0"):  # named by its index in the call
        sharded.generate([*reqs[:5], GenRequest(prompts[0], max_new_tokens=0)])
    with pytest.raises(ValueError, match="shards 0"):
        FastEngine(fast.model, fast.tokenizer, device="cpu", shards=0)


def test_one_thread_means_one_shard(varied, prompts, monkeypatch):
    fast, _ = varied
    monkeypatch.setattr(torch, "get_num_threads", lambda: 1)
    monkeypatch.setattr(fast, "_runner", None)
    fast.generate([GenRequest(p, temperature=0.0, max_new_tokens=3) for p in prompts])
    assert fast._runner is None  # no pool was started: the call ran inline
