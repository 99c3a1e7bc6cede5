"""The CPU memory policy (envace.cpu_memory): when it leaves the allocator alone, and what it changes in
glibc's allocator, read from glibc's own accounting (`mallinfo2`) in fresh subprocesses so no earlier
allocation shapes the heap. By default a fresh process maps a 16 MiB tensor with its own mmap and unmaps it
on free; under the policy it comes from the heap and stays there when freed (not trimmed back to the
kernel). Tensors of one size allocated and freed round after round grow the heap for a few rounds (torch
asks for 64-byte-aligned blocks; the small pieces the alignment cuts off sit in glibc's per-thread cache
and keep a freed block from merging with its neighbours until that cache is full) and then never again.
No timing: the speed it buys is bench/rl_step_bench.py's."""

from __future__ import annotations

import ctypes
import json
import os
import platform
import subprocess
import sys

import pytest

from envace.cpu_memory import left_alone_because

MiB = 1 << 20
ROUNDS = 24
PROBE = f"""
import ctypes, json, os, sys
import torch

class Mallinfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                 "fsmblks", "uordblks", "fordblks", "keepcost")]

libc = ctypes.CDLL("libc.so.6")
libc.mallinfo2.restype = Mallinfo2
if sys.argv[1] == "policy":
    from envace.cpu_threads import apply_thread_policy
    apply_thread_policy(1)

def info():
    m = libc.mallinfo2()
    return {{"heap": m.arena, "mapped": m.hblkhd, "free_in_heap": m.fordblks}}

rounds = [info()]
for _ in range({ROUNDS}):
    x = torch.empty(4 << 20).fill_(1.0)  # 16 MiB, every page touched
    alive = info()
    del x
    rounds.append({{"alive": alive, "freed": info()}})
print(json.dumps(rounds))
"""


def _glibc_with_mallinfo2() -> bool:
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    return hasattr(ctypes.CDLL("libc.so.6"), "mallinfo2")


def _probe(mode: str) -> tuple[dict, list[dict]]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("MALLOC_") and k not in ("GLIBC_TUNABLES", "LD_PRELOAD", "ENVACE_ALLOCATOR")}
    env["OMP_WAIT_POLICY"] = "PASSIVE"  # as the `envace` command sets it before torch loads
    out = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True, env=env,
                         timeout=300, check=True).stdout
    start, *rounds = json.loads(out.strip().splitlines()[-1])
    return start, rounds


@pytest.mark.skipif(not _glibc_with_mallinfo2(), reason="acts on glibc's allocator (mallinfo2: glibc >= 2.33)")
def test_a_16_mib_tensor_is_mapped_anew_by_default_and_kept_in_the_heap_under_the_policy():
    start, default = _probe("default")
    first = default[0]
    # default: the first one gets its own mapping while alive and is unmapped when freed
    assert first["alive"]["mapped"] - start["mapped"] >= 16 * MiB
    assert first["freed"]["mapped"] == start["mapped"]

    start, policy = _probe("policy")
    for r in policy:  # policy: never a mapping; each one freed stays in the heap, which is not trimmed
        assert r["alive"]["mapped"] == start["mapped"]
        assert r["freed"]["heap"] == r["alive"]["heap"]
        assert r["freed"]["free_in_heap"] - r["alive"]["free_in_heap"] >= 16 * MiB
    heap = [r["freed"]["heap"] for r in policy]
    # the heap grows for at most a few rounds (glibc's per-thread cache holds 7 pieces of a size), then
    # every later tensor reuses it
    assert heap[-1] - start["heap"] <= 10 * 16 * MiB
    assert len(set(heap[ROUNDS // 2:])) == 1, [h // MiB for h in heap]


@pytest.mark.parametrize("environ, want", [
    ({}, None),
    ({"MALLOC_TRIM_THRESHOLD_": "131072"}, "MALLOC_TRIM_THRESHOLD_ is set in the environment"),
    ({"MALLOC_MMAP_THRESHOLD_": "0"}, "MALLOC_MMAP_THRESHOLD_ is set in the environment"),
    ({"MALLOC_MMAP_THRESHOLD_": ""}, None),  # empty counts as unset
    ({"GLIBC_TUNABLES": "glibc.malloc.trim_threshold=0"}, "GLIBC_TUNABLES sets glibc.malloc tunables"),
    ({"GLIBC_TUNABLES": "glibc.cpu.hwcaps=-AVX2"}, None),  # tunables of something else
    ({"LD_PRELOAD": "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"}, "LD_PRELOAD loads jemalloc"),
    ({"LD_PRELOAD": "/opt/lib/libtcmalloc_minimal.so"}, "LD_PRELOAD loads tcmalloc"),
    ({"ENVACE_ALLOCATOR": "default"}, "ENVACE_ALLOCATOR=default"),
])
def test_the_users_allocator_settings_win(environ, want):
    assert left_alone_because(environ) == want


def test_a_user_setting_leaves_the_process_alone():
    out = subprocess.run([sys.executable, "-c", "from envace.cpu_memory import keep_freed_memory as k; "
                          "print(k()); print(k())"], capture_output=True, text=True, timeout=120, check=True,
                         env={**os.environ, "MALLOC_TRIM_THRESHOLD_": "131072"}).stdout
    assert out.split("\n")[:2] == ["left alone: MALLOC_TRIM_THRESHOLD_ is set in the environment"] * 2


def test_an_unknown_allocator_choice_is_named_with_the_fix():
    with pytest.raises(ValueError, match=r"ENVACE_ALLOCATOR='jemalloc'.*'default'"):
        left_alone_because({"ENVACE_ALLOCATOR": "jemalloc"})
