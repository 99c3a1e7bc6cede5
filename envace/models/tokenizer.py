"""Byte-level BPE tokenizer for the tiny model, trained offline with HF `tokenizers`.

Layout follows Qwen3: byte-level BPE, digits split one per token (a tiny model copies digit-by-digit
numbers far more easily), `<|endoftext|>` (pad), `<|im_start|>`, `<|im_end|>` (eos) as special tokens,
and the tool-call / tool-response / think tags as added but not special tokens, so
`decode(..., skip_special_tokens=True)` keeps tool-call markup. Departures: GPT-2's pre-tokenizer regex,
a tiny vocabulary, chat tokens cut from the corpus before training. Training is deterministic (`seed` is
accepted and recorded only). Saved dirs load with `AutoTokenizer.from_pretrained` as the generic fast
tokenizer (a model-specific class would rebuild the pre-tokenizer and stop round-tripping spaces).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Sequence

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from envace.models.chat_template import TEMPLATES

PAD_TOKEN = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
SPECIAL_TOKENS = (PAD_TOKEN, IM_START, IM_END)
ADDED_TOKENS = ("<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<think>", "</think>")
CHAT_TOKENS = SPECIAL_TOKENS + ADDED_TOKENS


def _pieces(corpus: Iterable[str], cut: re.Pattern[str]) -> Iterator[str]:
    for i, text in enumerate(corpus):
        if not isinstance(text, str):
            raise TypeError(f"corpus item {i} is {type(text).__name__}, not str; pass an iterable of strings")
        for piece in cut.split(text):
            if piece:
                yield piece


def train_tokenizer(corpus: Iterable[str], vocab_size: int = 1024, seed: int = 0,
                    extra_tokens: Sequence[str] = (), tool_format: str = "json") -> PreTrainedTokenizerFast:
    """Train a byte-level BPE on `corpus` and wrap it with the chat template.

    Ids 0..8 are the chat tokens in `CHAT_TOKENS` order, then `extra_tokens` (added, not special, one id
    each: e.g. a world's own markup tags), then the 256 byte symbols, then merges. The reached vocabulary
    can be smaller than `vocab_size` when the corpus runs out of merges.
    """
    extras = tuple(t for t in extra_tokens if t not in CHAT_TOKENS)
    reserved = CHAT_TOKENS + extras
    minimum = len(reserved) + 256
    if vocab_size < minimum:
        raise ValueError(f"vocab_size {vocab_size} is below the {minimum} ids the byte alphabet and "
                         f"{len(reserved)} chat tokens need; set vocab_size >= {minimum}")
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])
    bpe.decoder = decoders.ByteLevel()
    del seed  # BPE training has no randomness (module docstring)
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(reserved), show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    cut = re.compile("|".join(re.escape(t) for t in sorted(reserved, key=len, reverse=True)))
    bpe.train_from_iterator(_pieces(corpus, cut), trainer)

    # The trainer marks every reserved token special; Qwen3 keeps tool/think markup non-special.
    state = json.loads(bpe.to_str())
    for tok in state["added_tokens"]:
        tok["special"] = tok["content"] in SPECIAL_TOKENS
    bpe = Tokenizer.from_str(json.dumps(state))
    return wrap_tokenizer(bpe, tool_format)


def wrap_tokenizer(bpe: Tokenizer, tool_format: str = "json") -> PreTrainedTokenizerFast:
    """The transformers view of a trained `tokenizers.Tokenizer`: pad / eos set, chat template attached,
    no clean-up of spaces on decode (it would break exact round trips)."""
    tok = PreTrainedTokenizerFast(
        tokenizer_object=bpe,
        eos_token=IM_END,
        pad_token=PAD_TOKEN,
        extra_special_tokens=[IM_START],
        clean_up_tokenization_spaces=False,
        chat_template=TEMPLATES[tool_format],
        model_max_length=1 << 30,
    )
    return tok
