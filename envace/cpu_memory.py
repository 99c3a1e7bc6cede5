"""The CPU memory policy of envace's training and evaluation processes: glibc's allocator keeps freed
blocks for reuse instead of handing them back to the kernel.

Mechanism: torch's CPU tensors come from malloc. glibc serves a request above its mmap threshold (128 KiB
at start, raised as such blocks are freed, to at most 32 MiB) with fresh pages from mmap and unmaps them
on free, and it returns free memory at the top of its heap to the kernel once that exceeds the trim
threshold (twice the mmap threshold while that adapts). A training step allocates and frees the same
megabyte-sized tensors every step (activations, the (tokens, vocabulary) log-prob tables and their
gradients), so by default many of them keep arriving as new pages whose first touch is a page fault: in
the RL update's profile a 16 MB gradient table is zeroed at ~3 GB/s. `keep_freed_memory` fixes the mmap
threshold at the 32 MiB ceiling from the start and the trim threshold at 1 GiB (`mallopt`), so blocks up
to 32 MiB come from the heap and stay there for the next step (bench/rl_step_bench.py's envace arm; the
numbers are in docs/performance.md).

Cost: the process's resident memory stays near its peak instead of shrinking between steps, which a
training process reaches every step anyway. The policy applies only where the C library is glibc (elsewhere
nothing changes) and never over the user's own allocator settings: nothing is set when the environment
carries glibc's malloc variables (MALLOC_MMAP_THRESHOLD_, MALLOC_TRIM_THRESHOLD_, or malloc tunables in
GLIBC_TUNABLES), when another allocator (jemalloc, tcmalloc) is preloaded, or with ENVACE_ALLOCATOR=default.
Not in the paper: an execution choice of the CPU backend.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from collections.abc import Mapping

M_TRIM_THRESHOLD = -1  # glibc's mallopt parameter numbers (malloc.h)
M_MMAP_THRESHOLD = -3
# requests up to 32 MiB come from the heap (the ceiling glibc's own adaptive threshold reaches; larger blocks
# keep their own mappings, so a freed one never strands a hole of its size in the heap), and up to 1 GiB
# of free heap top is kept
MMAP_THRESHOLD_BYTES = 32 << 20
TRIM_THRESHOLD_BYTES = 1 << 30
OPT_OUT_VAR = "ENVACE_ALLOCATOR"  # "default": leave glibc's allocator as it starts
USER_VARS = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")

_applied: str | None = None  # the outcome of the first call in this process


def left_alone_because(environ: Mapping[str, str]) -> str | None:
    """Why the policy leaves this process's allocator alone (None: it applies). Pure, for tests."""
    choice = environ.get(OPT_OUT_VAR, "").strip()
    if choice == "default":
        return f"{OPT_OUT_VAR}=default"
    if choice:
        raise ValueError(f"{OPT_OUT_VAR}={choice!r} in the environment: set it to 'default' (glibc's own "
                         f"allocator behaviour) or unset it (envace's policy)")
    for var in USER_VARS:
        if environ.get(var):
            return f"{var} is set in the environment"
    if "glibc.malloc" in environ.get("GLIBC_TUNABLES", ""):
        return "GLIBC_TUNABLES sets glibc.malloc tunables"
    preload = environ.get("LD_PRELOAD", "")
    for other in ("jemalloc", "tcmalloc", "mimalloc"):
        if other in preload:
            return f"LD_PRELOAD loads {other}"
    return None


def keep_freed_memory() -> str:
    """Apply the policy to this process once; returns what happened ("kept", or why it was left alone)."""
    global _applied
    if _applied is not None:
        return _applied
    reason = left_alone_because(os.environ)
    if reason is None:
        reason = _mallopt()
    _applied = "kept" if reason is None else f"left alone: {reason}"
    return _applied


def _mallopt() -> str | None:
    """Raise glibc's thresholds; None on success, else why not."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c"))
    except OSError:
        return "the C library cannot be loaded"
    if not hasattr(libc, "gnu_get_libc_version") or not hasattr(libc, "mallopt"):
        return "the C library is not glibc"
    mallopt = libc.mallopt
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    # setting either threshold stops glibc's adaptive one, so both are set
    if not mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES):
        return "glibc refused the mmap threshold"
    if not mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES):
        return "glibc refused the trim threshold"
    return None
