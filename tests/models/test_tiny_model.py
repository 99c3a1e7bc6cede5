"""The tiny Qwen3 model: seeded, deterministic, a normal HF directory."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from envace.config import ConfigError, load_config
from envace.models.tiny import MANIFEST, TinyModelConfig, count_params, init_tiny_model


def test_same_seed_same_weights(tmp_path, corpus, tiny_dir):
    again = init_tiny_model(corpus, tmp_path / "again", TinyModelConfig(seed=0, extra_tokens=[], tool_format="json"))
    other = init_tiny_model(corpus, tmp_path / "other", TinyModelConfig(seed=1, extra_tokens=[], tool_format="json"))
    a, b, c = (load_file(d / "model.safetensors") for d in (tiny_dir, again, other))
    assert a.keys() == b.keys() == c.keys()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not all(torch.equal(a[k], c[k]) for k in a)
    assert (tiny_dir / "tokenizer.json").read_text() == (again / "tokenizer.json").read_text()


def test_loads_with_auto_classes(tiny_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer, Qwen3ForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_dir, local_files_only=True)
    tok = AutoTokenizer.from_pretrained(tiny_dir, local_files_only=True)
    assert isinstance(model, Qwen3ForCausalLM)
    cfg = model.config
    assert (cfg.hidden_size, cfg.num_hidden_layers, cfg.num_attention_heads, cfg.num_key_value_heads,
            cfg.head_dim, cfg.intermediate_size, cfg.max_position_embeddings) == (128, 2, 4, 2, 32, 384, 1024)
    assert cfg.tie_word_embeddings
    assert cfg.vocab_size % 64 == 0 and len(tok) <= cfg.vocab_size < len(tok) + 64
    assert model.generation_config.eos_token_id == [tok.eos_token_id, tok.pad_token_id]
    manifest = json.loads((tiny_dir / MANIFEST).read_text())
    assert manifest["n_params"] == count_params(model)
    assert manifest["config"] == TinyModelConfig(extra_tokens=[], tool_format="json").model_dump(mode="json")
    # hand count of the s128 shape: embeddings + per layer (q,k,v,o + q/k norms + 3 FFN mats + 2 norms) + final norm
    per_layer = 128 * 128 + 2 * 128 * 64 + 128 * 128 + 2 * 32 + 3 * 128 * 384 + 2 * 128
    assert manifest["n_params"] == cfg.vocab_size * 128 + 2 * per_layer + 128
    print(f"default tiny model: {manifest['n_params']} params, vocab {len(tok)} -> {cfg.vocab_size}")
    ids = torch.tensor([tok.encode("<|im_start|>user\nhi<|im_end|>")])
    with torch.no_grad():
        logits = model(ids).logits
    assert logits.shape == (1, ids.shape[1], cfg.vocab_size) and torch.isfinite(logits).all()


def test_config_validation_names_field():
    with pytest.raises(ConfigError, match="num_kv_heads"):
        load_config(TinyModelConfig, overrides=["num_kv_heads=3"])
    with pytest.raises(ConfigError, match="hidden_sise"):
        load_config(TinyModelConfig, overrides=["hidden_sise=64"])
    for name, field in TinyModelConfig.model_fields.items():
        assert field.description, f"{name} has no description"
