"""Load a local Hugging Face causal-LM directory (the tiny model, or a real Qwen3 / SmolLM2 dir) as the
policy. Never downloads: `HF_HUB_OFFLINE=1` is set and every call passes `local_files_only=True`, so a
wrong path fails fast with a message instead of reaching for the Hub.

dtype default: float32 on CPU (this machine has no fast bf16); on CUDA the dtype the checkpoint was
saved in (bf16 checkpoints stay bf16, the fp32 tiny model stays fp32).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch

WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                "pytorch_model.bin.index.json")


class ModelDirError(ValueError):
    """The path is not a loadable local model directory; the message names the path and the fix."""


def pick_device() -> torch.device:
    """CUDA when available, else CPU."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def _offline() -> None:
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def check_model_dir(path: str | Path) -> Path:
    """Raise ModelDirError unless `path` holds config.json, weights and a tokenizer."""
    p = Path(path).expanduser()
    fix = ("build one with envace.models.tiny.init_tiny_model, import SmolLM2 with "
           "envace.models.smollm2.import_smollm2, or point to a saved Hugging Face model directory")
    if not p.is_dir():
        raise ModelDirError(f"model path {p} is not a directory; {fix}")
    if not (p / "config.json").is_file():
        raise ModelDirError(f"model dir {p} has no config.json, so it is not a Hugging Face model dir; {fix}")
    if not any((p / f).is_file() for f in WEIGHT_FILES):
        raise ModelDirError(f"model dir {p} has config.json but no weights (looked for {', '.join(WEIGHT_FILES)}); "
                            f"re-save the model there with save_pretrained")
    if not ((p / "tokenizer.json").is_file() or (p / "tokenizer_config.json").is_file()):
        raise ModelDirError(f"model dir {p} has no tokenizer files (tokenizer.json); "
                            f"save the tokenizer there with tokenizer.save_pretrained")
    return p


def _saved_dtype(p: Path) -> torch.dtype:
    cfg = json.loads((p / "config.json").read_text())
    name = cfg.get("dtype") or cfg.get("torch_dtype") or "float32"
    dtype = getattr(torch, str(name), None)
    return dtype if isinstance(dtype, torch.dtype) else torch.float32


def load_policy(path: str | Path, device: str | torch.device | None = None,
                dtype: torch.dtype | str | None = None) -> tuple[Any, Any]:
    """(model, tokenizer) from a local model dir; the model is in eval mode on `device`
    (default `pick_device()`)."""
    _offline()
    from transformers import AutoModelForCausalLM, AutoTokenizer

    p = check_model_dir(path)
    dev = torch.device(device) if device is not None else pick_device()
    if isinstance(dtype, str):
        resolved = getattr(torch, dtype, None)
        if not isinstance(resolved, torch.dtype):
            raise ValueError(f"dtype {dtype!r} is not a torch dtype; use float32, bfloat16 or float16")
        dtype = resolved
    if dtype is None:
        dtype = _saved_dtype(p) if dev.type == "cuda" else torch.float32
    try:
        tokenizer = AutoTokenizer.from_pretrained(p, local_files_only=True)
        model = AutoModelForCausalLM.from_pretrained(p, local_files_only=True, dtype=dtype)
    except (OSError, ValueError, KeyError) as exc:
        raise ModelDirError(f"could not load the model in {p}: {exc}; check that the directory was written "
                            f"by save_pretrained and matches this transformers version") from exc
    # Exact decode(encode(text)) round trips matter more than prettified punctuation spacing.
    tokenizer.clean_up_tokenization_spaces = False
    if tokenizer.pad_token_id is None:
        # Batched generation left-pads; eos is the conventional stand-in when a model ships no pad.
        tokenizer.pad_token = tokenizer.eos_token
    return model.to(dev).eval(), tokenizer
