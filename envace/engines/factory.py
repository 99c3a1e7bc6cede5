"""Choose the generation engine for a local model: the fast engine when it can run the model, else HFEngine.

`make_engine(model, tokenizer, device)` returns `envace.engines.fast.FastEngine` for a supported
architecture (Qwen3 with full attention, or the Llama family, with default RoPE, on CPU or CUDA; see
`envace.engines.fast_model.unsupported_reason`) and `envace.engines.hf.HFEngine`, the reference
implementation, otherwise. `ENVACE_ENGINE=hf|fast` in the environment forces one (a forced "fast" on an
unsupported model is an error naming the reason). Every engine has a `name` ("fast" | "hf") for the
run's metadata; `engine_name` reads it.
"""

from __future__ import annotations

import os
from typing import Any

import torch

from envace.engines.fast import FastEngine
from envace.engines.fast_model import unsupported_reason
from envace.engines.hf import HFEngine

ENGINE_ENV = "ENVACE_ENGINE"


def make_engine(model: Any, tokenizer: Any, device: str | torch.device | None = None, *,
                kind: str | None = None, max_batch: int = 64) -> FastEngine | HFEngine:
    """The engine for `model` (moved to `device` when given). `kind`: "auto" (default), "fast" or "hf"."""
    kind = (kind or os.environ.get(ENGINE_ENV) or "auto").lower()
    if kind not in ("auto", "fast", "hf"):
        raise ValueError(f"engine kind {kind!r} (from the argument or ${ENGINE_ENV}) must be auto, fast or hf")
    if device is not None:
        model = model.to(torch.device(device))
    reason = unsupported_reason(model)
    if kind == "fast" and reason is not None:
        raise ValueError(f"the fast engine was asked for but cannot run this model: {reason}; use kind='hf'")
    if kind == "hf" or reason is not None:
        return HFEngine(model, tokenizer, device=device, max_batch=max_batch)
    return FastEngine(model, tokenizer, device=device, max_batch=max_batch)


def engine_name(engine: Any) -> str:
    """The engine's name for run metadata ("fast", "hf", or the class name of another engine)."""
    return getattr(engine, "name", type(engine).__name__)
