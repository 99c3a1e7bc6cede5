"""The tiny BPE tokenizer: exact round trips, single-id chat tokens, digit splitting, determinism."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from envace.models.tokenizer import ADDED_TOKENS, CHAT_TOKENS, SPECIAL_TOKENS, train_tokenizer


@pytest.fixture(scope="module")
def tok(corpus):
    return train_tokenizer(corpus, vocab_size=1024)


PIECES = st.one_of(
    st.text(alphabet=st.characters(codec="utf-8"), max_size=12),
    st.sampled_from(list(CHAT_TOKENS)),
    st.sampled_from([" ", "  ", "\n", "\t", " \n ", "0", "42", " 007", '{"a": 1}', '", "', "}}", "apple", " pear"]),
    st.integers(-10**9, 10**9).map(str),
    st.dictionaries(st.text(max_size=4), st.integers() | st.text(max_size=4), max_size=3).map(json.dumps),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(PIECES, max_size=8).map("".join))
def test_round_trip(tok, text):
    ids = tok.encode(text, add_special_tokens=False)
    assert tok.decode(ids, skip_special_tokens=False) == text


def test_chat_tokens_are_single_ids(tok):
    for i, t in enumerate(CHAT_TOKENS):
        assert tok.encode(t, add_special_tokens=False) == [i]
        assert tok.encode(f"x{t}y", add_special_tokens=False)[1] == i
    assert tok.pad_token == "<|endoftext|>" and tok.pad_token_id == 0
    assert tok.eos_token == "<|im_end|>" and tok.eos_token_id == 2


def test_tool_markup_is_not_special(tok):
    text = "<|im_start|>assistant\n<tool_call>\n{}\n</tool_call><think></think><|im_end|>"
    ids = tok.encode(text, add_special_tokens=False)
    assert tok.decode(ids, skip_special_tokens=True) == "assistant\n<tool_call>\n{}\n</tool_call><think></think>"
    assert set(SPECIAL_TOKENS) <= set(tok.all_special_tokens)
    assert not set(ADDED_TOKENS) & set(tok.all_special_tokens)


def test_digits_are_one_per_token(tok):
    ids = tok.encode("qty 1234567890", add_special_tokens=False)
    pieces = tok.convert_ids_to_tokens(ids)
    assert pieces[-10:] == list("1234567890")
    assert len(ids) == len(tok.encode("qty ", add_special_tokens=False)) + 10


def test_no_merges_wasted_on_chat_tokens(tok):
    merges = json.loads(tok.backend_tokenizer.to_str())["model"]["merges"]
    assert not [m for m in merges if "tool_c" in "".join(m) or "im_end" in "".join(m)]


def test_deterministic_and_vocab_reached(corpus, tok):
    again = train_tokenizer(corpus, vocab_size=1024, seed=0)
    assert again.backend_tokenizer.to_str() == tok.backend_tokenizer.to_str()
    # this small corpus runs out of merges before 1024
    assert len(CHAT_TOKENS) + 256 < len(tok) <= 1024
    print(f"vocab reached on a {len(corpus)}-line corpus: {len(tok)}")


def test_extra_tokens_are_single_ids(corpus):
    t = train_tokenizer(corpus[:10], vocab_size=400, extra_tokens=["<execution_result>", "</execution_result>"])
    assert t.encode("<execution_result>\n{}\n</execution_result>", add_special_tokens=False)[0] == len(CHAT_TOKENS)
    assert t.convert_ids_to_tokens(len(CHAT_TOKENS) + 1) == "</execution_result>"


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="vocab_size 100 .* set vocab_size >= 265"):
        train_tokenizer(["a"], vocab_size=100)
    with pytest.raises(TypeError, match="corpus item 1 is int"):
        train_tokenizer(["a", 3], vocab_size=300)


def test_auto_tokenizer_loads_saved_dir(tiny_dir, tok):
    from transformers import AutoTokenizer

    loaded = AutoTokenizer.from_pretrained(tiny_dir, local_files_only=True)
    text = ' {"item": "pear", "qty": 12}  two  spaces\n<tool_call>x</tool_call><|im_end|>'
    ids = loaded.encode(text, add_special_tokens=False)
    assert ids == tok.encode(text, add_special_tokens=False)
    assert loaded.decode(ids, skip_special_tokens=False) == text
    msgs = [{"role": "user", "content": "hi there"}]
    assert loaded.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True) == \
        "<|im_start|>user\nhi there<|im_end|>\n<|im_start|>assistant\n"
