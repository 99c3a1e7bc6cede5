"""Choose the generation engine for a local model: the fast engine when it can run the model, else HFEngine.

Engine kinds are an `envace.registry.Registry` family (`ENGINES`), each entry a class built as
`Engine(model, tokenizer, device=..., max_batch=...)`, registered lazily so a kind's module is imported only
when it is chosen. An entry's metadata may name `unsupported`, a `"module:function"` returning why the kind
cannot run a model (None when it can). `make_engine(model, tokenizer, device)` under kind "auto" (the
default) returns `envace.engines.fast.FastEngine` for a supported architecture (Qwen3 with full attention,
or the Llama family, with default RoPE, on CPU or CUDA; see `envace.engines.fast_model.unsupported_reason`)
and `envace.engines.hf.HFEngine`, the reference implementation, otherwise. `ENVACE_ENGINE=hf|fast` in the
environment forces one (a forced kind that cannot run the model is an error naming the reason). Every
engine has a `name` ("fast" | "hf") for the run's metadata; `engine_name` reads it.
"""

from __future__ import annotations

import importlib
import os
from typing import Any

import torch

from envace.registry import Registry

ENGINE_ENV = "ENVACE_ENGINE"
AUTO_ORDER = ("fast", "hf")  # "auto" takes the first of these that can run the model

ENGINES: Registry[type] = Registry("engine kind")
ENGINES.add_lazy("fast", "envace.engines.fast:FastEngine", unsupported="envace.engines.fast_model:unsupported_reason")
ENGINES.add_lazy("hf", "envace.engines.hf:HFEngine")


def unsupported(kind: str, model: Any) -> str | None:
    """Why engine `kind` cannot run `model`, or None when it can (kinds without a check run every model)."""
    check = ENGINES.info(kind).get("unsupported")
    if check is None:
        return None
    module, attr = check.split(":")
    return getattr(importlib.import_module(module), attr)(model)


def make_engine(model: Any, tokenizer: Any, device: str | torch.device | None = None, *,
                kind: str | None = None, max_batch: int = 64) -> Any:
    """The engine for `model` (moved to `device` when given). `kind`: "auto" (default) or a registered kind."""
    kind = (kind or os.environ.get(ENGINE_ENV) or "auto").lower()
    if kind != "auto" and kind not in ENGINES:
        *head, last = ["auto", *ENGINES.names()]
        raise ValueError(f"engine kind {kind!r} (from the argument or ${ENGINE_ENV}) must be {', '.join(head)} "
                         f"or {last}")
    if device is not None:
        model = model.to(torch.device(device))
    if kind == "auto":
        kind = next(k for k in AUTO_ORDER if k in ENGINES and unsupported(k, model) is None)
    else:
        reason = unsupported(kind, model)
        if reason is not None:
            raise ValueError(f"the {kind} engine was asked for but cannot run this model: {reason}; use kind='hf'")
    return ENGINES.get(kind)(model, tokenizer, device=device, max_batch=max_batch)


def engine_name(engine: Any) -> str:
    """The engine's name for run metadata ("fast", "hf", or the class name of another engine)."""
    return getattr(engine, "name", type(engine).__name__)
