"""Load a local Hugging Face causal-LM directory (the tiny model, or a real Qwen3 / SmolLM2 dir) as the
policy. Never downloads: `HF_HUB_OFFLINE=1` is set and every call passes `local_files_only=True`, so a
wrong path fails fast with a message instead of reaching for the Hub.

`quiet_libraries` silences transformers / huggingface_hub / datasets progress bars and info logs (called
on every load and save); `save_model` writes a model dir with file modes from the umask, not the 0600
that safetensors' private temporary file leaves.

dtype default: float32 on CPU (this machine has no fast bf16); on CUDA the dtype the checkpoint was
saved in (bf16 checkpoints stay bf16, the fp32 tiny model stays fp32).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch

from envace.models.attention import use_native_gqa

# re-exported: the checks live where they need no torch
from envace.models.model_dir import MAKE_MODEL, WEIGHT_FILES, ModelDirError, check_model_dir  # noqa: F401


def quiet_libraries() -> None:
    """Silence the libraries' own progress bars and info logs ("Loading weights", "Writing model shards",
    Hub downloads, datasets maps) so envace's own bars and results stay readable. envace's bars use tqdm
    directly and are unaffected. Idempotent; called wherever a model is loaded or saved and by the CLI."""
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
    import sys

    if "transformers" in sys.modules or "transformers.utils" in sys.modules:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # also disables huggingface_hub's bars
        hf_logging.set_verbosity_error()
    if "huggingface_hub" in sys.modules:
        from huggingface_hub.utils import disable_progress_bars

        disable_progress_bars()
    if "datasets" in sys.modules:
        import datasets

        datasets.disable_progress_bars()
        datasets.logging.set_verbosity_error()


def respect_umask(path: str | Path) -> None:
    """Give the files under `path` (a file or a directory tree) the mode the process umask allows
    (0644 under the usual 022). Writers that go through a private temporary file (safetensors, mkstemp)
    leave 0600, which hides a shared model or data set from other users of the machine."""
    mask = os.umask(0)
    os.umask(mask)
    root = Path(path)
    files = [root] if root.is_file() else [p for p in root.rglob("*") if p.is_file()]
    for f in files:
        os.chmod(f, 0o666 & ~mask)


def save_model(model: Any, tokenizer: Any, out: str | Path) -> Path:
    """`save_pretrained` the model (safetensors) and tokenizer into `out`, quietly, with umask modes."""
    quiet_libraries()
    out = Path(out)
    model.save_pretrained(out, safe_serialization=True)
    if tokenizer is not None:
        tokenizer.save_pretrained(out)
    respect_umask(out)
    return out


def pick_device() -> torch.device:
    """CUDA when available, else CPU."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def _offline() -> None:
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


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

    quiet_libraries()

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
        # safetensors whenever the dir has them: a stray pytorch_model.bin beside them is never unpickled
        safe = any((p / w).is_file() for w in WEIGHT_FILES[:2]) or None
        model = AutoModelForCausalLM.from_pretrained(p, local_files_only=True, dtype=dtype, use_safetensors=safe)
    except Exception as exc:  # safetensors, JSON and tokenizer errors have no common base class
        detail = " ".join(str(exc).split())[:300]
        raise ModelDirError(p, f"could not load the model in {p}: {type(exc).__name__}: {detail}",
                            f"re-create it ({MAKE_MODEL})") from exc
    # Exact decode(encode(text)) round trips matter more than prettified punctuation spacing.
    tokenizer.clean_up_tokenization_spaces = False
    if tokenizer.pad_token_id is None:
        # Batched generation left-pads; eos is the conventional stand-in when a model ships no pad.
        tokenizer.pad_token = tokenizer.eos_token
    model = model.to(dev).eval()
    use_native_gqa(model)  # envace.models.attention: the same attention, no K/V head copies on CPU
    return model, tokenizer
