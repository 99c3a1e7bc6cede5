"""What makes a path a loadable local model directory (config.json, weights, a tokenizer), checked without
importing torch or transformers, so a wrong path is reported at once; `ModelDirError` names the path and the fix.

A checkpoint's config.json comes from wherever the checkpoint came from, and transformers builds every tensor
it describes before loading a weight. `check_model_config` therefore bounds its dimensions first: each
must be a positive integer, `num_hidden_layers` at most MODEL_LAYERS, and the memory they imply (the
weights of a Llama / Qwen-shaped decoder in the dtype config.json names, plus an fp32 rotary table of
max_position_embeddings x head_dim, the largest table the engines build) at most MODEL_BYTES, the
machine's physical memory unless set (envace.input_budget). The estimate is a guard against dimensions
far beyond the machine, not an exact count (a CPU load upcasts 16-bit weights to fp32: twice that).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from envace.input_budget import MODEL_BYTES, MODEL_LAYERS, BudgetError, model_bytes_limit

WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                "pytorch_model.bin.index.json")


class ModelDirError(ValueError):
    """The path is not a loadable local model directory; the message names the path and the fix.
    `path`, `what` and `fix` hold the parts on their own (for one-line CLI errors)."""

    def __init__(self, path: str | Path, what: str, fix: str) -> None:
        super().__init__(f"{what}; {fix}")
        self.path, self.what, self.fix = str(path), what, fix


MAKE_MODEL = ("build one with `envace model init --out DIR`, import SmolLM2 with `envace model import-smollm2 "
              "--out DIR`, or pass model=<a saved Hugging Face model dir>")


DIMENSIONS = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
              "num_key_value_heads", "head_dim", "max_position_embeddings")
CONFIG_FIX = "fix config.json (it must describe the saved weights) or take the model from its source again"


def estimated_bytes(cfg: dict[str, Any]) -> int:
    """Bytes of weights (in the config's dtype) and rotary table that a decoder config (Llama / Qwen keys)
    implies."""
    get = {k: int(cfg.get(k) or 0) for k in DIMENSIONS}
    h, heads, layers = get["hidden_size"], get["num_attention_heads"], get["num_hidden_layers"]
    kv = get["num_key_value_heads"] or heads
    hd = get["head_dim"] or (h // heads if heads else 0)
    per_layer = 2 * h * heads * hd + 2 * h * kv * hd + 3 * h * get["intermediate_size"] + 2 * h + 2 * hd
    embeddings = get["vocab_size"] * h * (1 if cfg.get("tie_word_embeddings") else 2)
    rope = 12 * get["max_position_embeddings"] * hd  # cos and sin (fp32), then their complex product
    width = 2 if str(cfg.get("dtype") or cfg.get("torch_dtype")) in ("bfloat16", "float16") else 4
    return width * (embeddings + layers * per_layer + h) + rope


def check_model_config(p: Path) -> dict[str, Any]:
    """config.json of the model dir `p`, its dimensions bounded (see the module docstring); raises
    ModelDirError naming the file, the field, the limit and the setting."""
    path = p / "config.json"
    try:
        cfg = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise ModelDirError(path, f"{path} is not valid JSON ({type(exc).__name__})", CONFIG_FIX) from None
    if not isinstance(cfg, dict):
        raise ModelDirError(path, f"{path} holds a JSON {type(cfg).__name__}, not an object", CONFIG_FIX)
    for section in (cfg, cfg.get("text_config")):  # multimodal configs keep the decoder's under text_config
        if not isinstance(section, dict):
            continue
        for key in DIMENSIONS:
            v = section.get(key)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
                raise ModelDirError(path, f"{path}: {key} is {v!r}, not a positive integer", CONFIG_FIX)
        try:
            MODEL_LAYERS.check(section.get("num_hidden_layers") or 0, str(path), "num_hidden_layers is", CONFIG_FIX)
            need, limit = estimated_bytes(section), model_bytes_limit()
            if need > limit:
                raise MODEL_BYTES.error(str(path), "its dimensions need about", need, CONFIG_FIX, limit=limit)
        except BudgetError as exc:
            raise ModelDirError(path, f"{path}: {exc.what}", exc.fix) from None
    return cfg


def check_model_dir(path: str | Path) -> Path:
    """Raise ModelDirError unless `path` holds config.json with bounded dimensions, weights and a tokenizer."""
    p = Path(path).expanduser()
    if not p.is_dir():
        raise ModelDirError(p, f"model path {p} is not a directory", MAKE_MODEL)
    if not (p / "config.json").is_file():
        raise ModelDirError(p, f"model dir {p} has no config.json, so it is not a Hugging Face model dir",
                            MAKE_MODEL)
    if not any((p / f).is_file() for f in WEIGHT_FILES):
        raise ModelDirError(p, f"model dir {p} has config.json but no weights (looked for {', '.join(WEIGHT_FILES)})",
                            MAKE_MODEL)
    if not ((p / "tokenizer.json").is_file() or (p / "tokenizer_config.json").is_file()):
        raise ModelDirError(p, f"model dir {p} has no tokenizer files (tokenizer.json)", MAKE_MODEL)
    check_model_config(p)
    return p
