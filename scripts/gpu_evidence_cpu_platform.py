"""The `--dry-run` stand-in of a CUDA device for the verl_memory stage (scripts/gpu_evidence_verl.py): a
`cpu` platform registered through verl's platform plugin point (`PlatformRegistry`, selected with
`VERL_PLATFORM=cpu`), and verl's own FSDP engine registered for the `cpu` device in verl's engine registry
(verl registers it for cuda and npu only).

The test suite keeps a fuller CPU platform for verl's end-to-end CPU run; the evidence script must not
import from tests/, so this is the smallest one the dry run needs: one process, gloo (the stage initialises
the process group itself), no Ray placement, no IPC, no memory statistics (the dry run reports none).
Import it before anything asks verl for its platform (the stage imports it first thing in the case process).
"""

from __future__ import annotations

import types
from contextlib import contextmanager

import torch
from verl.plugin.platform import PlatformBase, PlatformRegistry

NAME = "cpu"


def _device_module() -> types.ModuleType:
    """`torch.cpu` plus the `torch.cuda` calls verl makes that `torch.cpu` lacks, answered as a CPU would."""
    module = types.ModuleType("gpu_evidence_cpu_device")
    module.__dict__.update({k: v for k, v in vars(torch.cpu).items() if not k.startswith("__")})
    nothing, zero = (lambda *a, **k: None), (lambda *a, **k: 0)
    for name in ("set_device", "synchronize", "empty_cache", "ipc_collect", "reset_peak_memory_stats",
                 "set_per_process_memory_fraction"):
        setattr(module, name, nothing)
    for name in ("memory_allocated", "memory_reserved", "max_memory_allocated", "max_memory_reserved"):
        setattr(module, name, zero)
    module.is_available = lambda: True
    module.device_count = lambda: 1
    module.current_device = lambda: torch.device("cpu")
    module.mem_get_info = lambda *a, **k: (1 << 34, 1 << 34)
    module.get_rng_state = lambda *a, **k: torch.get_rng_state()
    module.set_rng_state = lambda state, *a, **k: torch.set_rng_state(state)
    module.manual_seed = module.manual_seed_all = torch.manual_seed
    module.get_device_name = lambda *a, **k: "cpu"
    return module


@PlatformRegistry.register(platform=NAME)
class DryRunCPU(PlatformBase):
    """verl's platform interface answered for the CPU of the dry run."""

    _module = _device_module()

    @property
    def device_name(self) -> str:
        return "cpu"

    @property
    def vendor_name(self) -> str:
        return "cpu"

    @property
    def device_module(self) -> types.ModuleType:
        return self._module

    def is_available(self) -> bool:
        return True

    def current_device(self) -> torch.device:
        return torch.device("cpu")  # verl moves tensors with .to(current_device); an index would name a GPU

    def device_count(self) -> int:
        return 1

    def set_device(self, device_index: int) -> None:
        return None

    def synchronize(self, device_index: int | None = None) -> None:
        return None

    def manual_seed(self, seed: int) -> None:
        torch.manual_seed(seed)

    def manual_seed_all(self, seed: int) -> None:
        torch.manual_seed(seed)

    def set_allocator_settings(self, settings: str) -> None:
        return None

    def empty_cache(self) -> None:
        return None

    def get_device_capability(self, device_index: int = 0) -> tuple[int | None, int | None]:
        return None, None

    def communication_backend_name(self) -> str:
        return "gloo"

    def visible_devices_envvar(self) -> str:
        return "CUDA_VISIBLE_DEVICES"

    @contextmanager
    def nvtx_range(self, msg: str):
        yield

    def profiler_start(self) -> None:
        return None

    def profiler_stop(self) -> None:
        return None

    def ray_resource_name(self) -> str:
        return "GPU"

    def ray_noset_envvars(self) -> list[str]:
        return []

    def is_ipc_supported(self) -> bool:
        return False

    def cudart(self) -> None:
        return None


def register_engine() -> None:
    """verl's FSDPEngineWithLMHead, unchanged, under device `cpu` in verl's engine registry."""
    from verl.workers.engine.base import EngineRegistry
    from verl.workers.engine.fsdp.transformer_impl import FSDPEngineWithLMHead

    if NAME not in EngineRegistry._engines.get("language_model", {}).get("fsdp", {}):
        EngineRegistry.register(model_type="language_model", backend=["fsdp", "fsdp2"], device=NAME)(
            FSDPEngineWithLMHead)
