"""The tiny Qwen3-architecture policy of the embedded backend, built and cold-started by the project.

`init_tiny_model` trains the tokenizer on a corpus, builds a randomly initialised `Qwen3ForCausalLM`
from a seed and saves an ordinary Hugging Face directory (config.json, model.safetensors, tokenizer files,
chat template, generation_config.json) plus `envace_model.json` with the config used and the parameter
count, so any transformers code (and `load_policy`) loads it. Same corpus + same seed -> identical files.

Defaults are the "s128" shape of the feasibility probe (2 layers, hidden 128, ~0.5 M parameters), the
largest that trains fast enough for a minutes-long CPU demo. Departures from a real Qwen3: tied
embeddings, a vocabulary of ~1k ids padded to a multiple of 64 (padding ids are never produced by the
tokenizer; a trained model gives them ~0 probability), and a 1024-token context.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Literal

import torch
from pydantic import Field, model_validator
from transformers import GenerationConfig, Qwen3Config, Qwen3ForCausalLM

from envace.config import BaseConfig
from envace.models.loading import save_model
from envace.models.tokenizer import IM_END, PAD_TOKEN, train_tokenizer

MANIFEST = "envace_model.json"


class TinyModelConfig(BaseConfig):
    hidden_size: int = Field(128, ge=8, description="Width of the residual stream.")
    num_layers: int = Field(2, ge=1, description="Number of transformer blocks.")
    num_heads: int = Field(4, ge=1, description="Query heads per attention layer.")
    num_kv_heads: int = Field(2, ge=1, description="Key/value heads (grouped-query attention); divides num_heads.")
    head_dim: int = Field(32, ge=4, description="Width of one attention head (even, for RoPE).")
    intermediate_size: int = Field(384, ge=8, description="Hidden width of the SwiGLU feed-forward block.")
    max_position: int = Field(1024, ge=16, description="Longest sequence (prompt + response) the model is built for.")
    vocab_size: int = Field(1024, ge=300, description="Target BPE vocabulary; the corpus may stop it earlier.")
    vocab_multiple: int = Field(64, ge=1, description="The model's embedding rows are padded to a multiple of this.")
    rope_theta: float = Field(10000.0, gt=0, description="RoPE base frequency.")
    tie_embeddings: bool = Field(True, description="Share the input embedding and the output projection.")
    seed: int = Field(0, ge=0, description="Seed of the weight initialisation (and recorded for the tokenizer).")
    tool_format: Literal["json", "signature"] = Field(
        "signature", description="How the chat template prints tools: Qwen3's JSON lines or one-line signatures.")
    extra_tokens: list[str] = Field(default_factory=lambda: ["<execution_result>", "</execution_result>"],
                                    description="Markup tags given one token id each.")

    @model_validator(mode="after")
    def _check_shapes(self) -> TinyModelConfig:
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"num_heads {self.num_heads} is not divisible by num_kv_heads {self.num_kv_heads}; "
                             f"set num_kv_heads to a divisor of num_heads")
        if self.head_dim % 2:
            raise ValueError(f"head_dim {self.head_dim} must be even for rotary embeddings; set an even head_dim")
        return self


def padded_vocab(n_tokens: int, multiple: int) -> int:
    return -(-n_tokens // multiple) * multiple


def qwen3_config(cfg: TinyModelConfig, n_tokens: int, pad_id: int, eos_ids: list[int]) -> Qwen3Config:
    return Qwen3Config(
        vocab_size=padded_vocab(n_tokens, cfg.vocab_multiple),
        hidden_size=cfg.hidden_size,
        intermediate_size=cfg.intermediate_size,
        num_hidden_layers=cfg.num_layers,
        num_attention_heads=cfg.num_heads,
        num_key_value_heads=cfg.num_kv_heads,
        head_dim=cfg.head_dim,
        max_position_embeddings=cfg.max_position,
        rope_parameters={"rope_type": "default", "rope_theta": cfg.rope_theta},
        tie_word_embeddings=cfg.tie_embeddings,
        pad_token_id=pad_id,
        bos_token_id=None,
        eos_token_id=eos_ids[0],
    )


def build_model(qcfg: Qwen3Config, seed: int) -> Qwen3ForCausalLM:
    """A randomly initialised model; the global RNG is restored afterwards so callers' streams are untouched."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen3ForCausalLM(qcfg)
    return model.float().eval()


def count_params(model: torch.nn.Module) -> int:
    """Distinct parameters (tied tensors counted once)."""
    return sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())


def init_tiny_model(corpus: Iterable[str], out_dir: str | Path, cfg: TinyModelConfig | None = None) -> Path:
    """Train the tokenizer on `corpus`, build a seeded random model and save both to `out_dir`.

    An existing `out_dir` is replaced. Returns the directory.
    """
    cfg = cfg or TinyModelConfig()
    out = Path(out_dir)
    tok = train_tokenizer(corpus, vocab_size=cfg.vocab_size, seed=cfg.seed, extra_tokens=cfg.extra_tokens,
                          tool_format=cfg.tool_format)
    pad_id = tok.convert_tokens_to_ids(PAD_TOKEN)
    eos_ids = [tok.convert_tokens_to_ids(IM_END), pad_id]
    qcfg = qwen3_config(cfg, len(tok), pad_id, eos_ids)
    model = build_model(qcfg, cfg.seed)
    model.generation_config = GenerationConfig(eos_token_id=eos_ids, pad_token_id=pad_id, bos_token_id=None,
                                               do_sample=False)
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    save_model(model, tok, out)  # quiet, umask file modes
    manifest = {
        "kind": "envace-tiny-qwen3",
        "config": cfg.model_dump(mode="json"),
        "n_params": count_params(model),
        "n_params_no_embeddings": count_params(model) - model.get_input_embeddings().weight.numel(),
        "tokenizer_vocab": len(tok),
        "model_vocab": qcfg.vocab_size,
    }
    (out / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    return out
