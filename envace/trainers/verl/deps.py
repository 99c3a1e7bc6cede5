"""Guarded imports of verl's optional pieces for the distributed backend.

Everything heavy (verl, ray, transfer_queue, vllm) is imported only by the modules of this package, and
only through `require`, so a missing piece fails with envace.extras' one-line `MissingExtra` (what is
missing, what needs it, what to install) instead of a bare ModuleNotFoundError deep inside verl. verl and
Ray come with the `cluster` extra; vLLM / SGLang for the cluster come from verl's own tested stack.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from envace.extras import MissingExtra, install_command, missing

__all__ = ["INSTALL_GPU", "INSTALL_VERL", "MissingExtra", "VERL_VERSION", "require"]

VERL_VERSION = "0.9.1"
CLUSTER = "cluster"
INSTALL_VERL = f"{install_command(CLUSTER)} (verl[verl-core]=={VERL_VERSION} and ray)"
# verl 0.9.1's own GPU extras pin vllm==0.24.0 with torch==2.11.0 (and sglang==0.5.12), which cannot resolve
# with envace's CPU pin torch==2.13.0: a cluster installs verl's stack from requirements/gpu-cluster.txt and
# envace with --no-deps (docs/gpu.md, section 1), on GPU machines only
INSTALL_GPU = ("pip install -r requirements/gpu-cluster.txt && pip install --no-deps -e .  (GPU machines only: "
               "verl's tested vllm 0.24.0 + torch 2.11.0; see docs/gpu.md)")

# module -> (what needs it, the extra that brings it or None, how to install it)
_HINTS: dict[str, tuple[str, str | None, str]] = {
    "verl": ("the verl backend", CLUSTER, INSTALL_VERL),
    "ray": ("the verl backend (Ray cluster)", CLUSTER, INSTALL_VERL),
    "transfer_queue": ("verl's V1 trainer (TransferQueue)", CLUSTER, INSTALL_VERL),
    "hydra": ("composing verl's config", CLUSTER, INSTALL_VERL),
    "vllm": ("a vLLM rollout server", None, INSTALL_GPU),
    "sglang": ("an SGLang rollout server", None, f"pip install 'verl[sglang,fsdp]=={VERL_VERSION}'"),
}


def require(module: str) -> ModuleType:
    """Import `module` (e.g. "verl.trainer.ppo.core_algos") or raise MissingExtra naming what to install: the
    hint of the package found missing, else of the module asked for, else the verl backend's."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        root = (exc.name or module).split(".")[0]
        purpose, extra, how = _HINTS.get(root, _HINTS.get(module.split(".")[0], _HINTS["verl"]))
        raise missing(module, exc, purpose, extra, how) from exc

