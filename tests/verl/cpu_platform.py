"""A CPU platform for verl, registered through verl's own platform plugin point
(`verl.plugin.platform.PlatformRegistry`, selected with `VERL_PLATFORM=cpu`), so verl's FSDP workers,
rollout adapters and trainer run on CPU tensors with gloo collectives.

Imported in every verl process through `VERL_USE_EXTERNAL_MODULES` (verl imports the listed modules at
`import verl`, before anything asks for the platform). Ray still places verl's workers on "GPU"
resources: the test's Ray head declares fake GPUs, and each worker's tensors stay on the CPU.

`device_module` is `torch.cpu` with the calls verl makes on `torch.cuda` that `torch.cpu` lacks
(memory statistics, cache release, RNG state, IPC cleanup) answered as a CPU would: nothing cached,
nothing to release. No CUDA IPC (`is_ipc_supported` is False): verl's weight sync then takes its own
shared-memory path.
"""

from __future__ import annotations

import types
from contextlib import contextmanager

import torch
from verl.plugin.platform import PlatformBase, PlatformRegistry

PLATFORM = "cpu"


def _device_module() -> types.ModuleType:
    module = types.ModuleType("envace_test_cpu_device")
    for name in dir(torch.cpu):
        if not name.startswith("__"):
            setattr(module, name, getattr(torch.cpu, name))
    zero = lambda *a, **k: 0  # noqa: E731
    none = lambda *a, **k: None  # noqa: E731
    module.is_available = lambda: True
    module.device_count = lambda: 1
    module.current_device = lambda: torch.device("cpu")
    module.set_device = none
    module.synchronize = none
    module.empty_cache = none
    module.ipc_collect = none
    module.memory_allocated = zero
    module.memory_reserved = zero
    module.max_memory_allocated = zero
    module.max_memory_reserved = zero
    module.reset_peak_memory_stats = none
    module.set_per_process_memory_fraction = none
    module.mem_get_info = lambda *a, **k: (1 << 34, 1 << 34)
    module.get_rng_state = lambda *a, **k: torch.get_rng_state()
    module.set_rng_state = lambda state, *a, **k: torch.set_rng_state(state)
    module.manual_seed = torch.manual_seed
    module.manual_seed_all = torch.manual_seed
    module.get_device_name = lambda *a, **k: "cpu"
    return module


@PlatformRegistry.register(platform=PLATFORM)
class PlatformCPU(PlatformBase):
    """verl's platform interface answered for the CPU (gloo, no IPC, Ray's GPU resource for placement)."""

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
        # verl moves tensors with `.to(get_device_id())` / `device=get_device_id()`; a bare index would name
        # an accelerator, the cpu device names the CPU
        return torch.device("cpu")

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
        return "GPU"  # the test's Ray head declares fake GPUs; verl's placement counts them

    def ray_noset_envvars(self) -> list[str]:
        return ["RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES"]

    def is_ipc_supported(self) -> bool:
        return False

    def cudart(self) -> None:
        return None


def _one_backend_per_device(init_process_group):
    """verl builds its process-group backend as f"cpu:gloo,{device}:{backend}" (verl/utils/distributed.py,
    `initialize_global_process_group_ray`), which on the CPU platform names the cpu device twice, and torch
    refuses "cpu:gloo,cpu:gloo". The same backend named twice is collapsed to one; anything else passes."""

    def init(*args, backend=None, **kwargs):
        if isinstance(backend, str) and "," in backend:
            parts = list(dict.fromkeys(p.strip() for p in backend.split(",")))
            backend = parts[0] if len(parts) == 1 else ",".join(parts)
        return init_process_group(*args, backend=backend, **kwargs)

    init.envace_one_backend_per_device = True
    return init


if not getattr(torch.distributed.init_process_group, "envace_one_backend_per_device", False):
    torch.distributed.init_process_group = _one_backend_per_device(torch.distributed.init_process_group)
