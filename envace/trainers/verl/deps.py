"""Guarded imports of verl's optional pieces for the distributed backend.

Everything heavy (verl, ray, transfer_queue, vllm) is imported only by the modules of this package, and
only through `require`, so a missing piece fails with an error that names what to install instead of a
bare ModuleNotFoundError deep inside verl.
"""

from __future__ import annotations

import importlib
from types import ModuleType

VERL_VERSION = "0.9.1"
INSTALL_VERL = f"pip install 'verl[verl-core]=={VERL_VERSION}'"
# verl 0.9.1's own GPU extras pin vllm==0.24.0 with torch==2.11.0 (and sglang==0.5.12), which cannot resolve
# with envace's CPU pin torch==2.13.0: a cluster installs verl's stack from requirements/gpu-cluster.txt and
# envace with --no-deps (docs/gpu.md, section 1), on GPU machines only
INSTALL_GPU = ("pip install -r requirements/gpu-cluster.txt && pip install --no-deps -e .  (GPU machines only: "
               "verl's tested vllm 0.24.0 + torch 2.11.0; see docs/gpu.md)")

# module -> (what it is for, how to install it)
_HINTS: dict[str, tuple[str, str]] = {
    "verl": ("the verl backend", INSTALL_VERL),
    "ray": ("the verl backend (Ray cluster)", INSTALL_VERL),
    "transfer_queue": ("verl's V1 trainer (TransferQueue)", INSTALL_VERL),
    "vllm": ("vLLM rollout servers", INSTALL_GPU),
    "sglang": ("SGLang rollout servers", f"pip install 'verl[sglang,fsdp]=={VERL_VERSION}'"),
}


class MissingExtra(ImportError):
    """An optional dependency of the verl backend is not installed; the message says what to install."""


def require(module: str) -> ModuleType:
    """Import `module` (e.g. "verl.trainer.ppo.core_algos") or raise MissingExtra naming the extra."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        root = (exc.name or module).split(".")[0]
        purpose, how = _HINTS.get(root, _HINTS.get(module.split(".")[0], ("the verl backend", INSTALL_VERL)))
        raise MissingExtra(f"{module} could not be imported ({exc}); {purpose} needs it: {how}") from exc


def available(module: str) -> bool:
    """True when `module` imports (used by the plugin, which must never raise)."""
    try:
        importlib.import_module(module)
    except ImportError:
        return False
    return True
