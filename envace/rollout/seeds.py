"""Stable per-generation seeds.

`derive_seed(seed, step, prompt_index, sample_index, role, generation_index)` hashes its parts with
SHA-256 into a 63-bit integer, so every generation request gets a seed that is the same in every process
and on every machine (Python's `hash` is salted per process) and differs when any part differs. Parts
are typed in the hash, so `1`, `"1"`, `True` and `1.0` give different seeds. `generation_seed` is the one
layout the rollout machine uses (test-time rehearsal reads it to know which request opens a committed run).
"""

from __future__ import annotations

import hashlib
import json
from enum import Enum
from typing import Any

_MASK_63 = (1 << 63) - 1


def _canonical(part: Any) -> list[str]:
    if isinstance(part, Enum):
        part = part.value
    if isinstance(part, bool):  # before int: bool is an int subclass
        return ["bool", str(part)]
    if isinstance(part, int):
        return ["int", str(part)]
    if isinstance(part, float):
        return ["float", repr(part)]
    if isinstance(part, str):
        return ["str", part]
    if part is None:
        return ["none", ""]
    raise TypeError(f"derive_seed parts must be int, float, str, bool, None or an Enum; got "
                    f"{type(part).__name__} {part!r}")


def derive_seed(*parts: Any) -> int:
    """A stable 63-bit seed from the ordered parts (e.g. seed, step, prompt, sample, role, index)."""
    payload = json.dumps([_canonical(p) for p in parts], separators=(",", ":"))
    digest = hashlib.sha256(payload.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") & _MASK_63


def generation_seed(seed: int, step: int, prompt_index: int, sample_index: int, role: Any, index: int) -> int:
    """The seed of generation `index` of `role` in episode (prompt_index, sample_index) of a rollout."""
    return derive_seed(seed, step, prompt_index, sample_index, role, index)
