"""Seeded task generation with train / val / test splits.

Held-out design (tiny_model_probe.md, probe 2): every shape holds out a fixed pair of its key
entities. A task's *pairs* are (shape, e) for each key entity e it uses; train and val tasks contain no
held-out pair, and every test task contains at least one, so a test task is a shape × entity
combination never seen in training while each entity still occurs in training through other shapes.
The held-out set is fixed by the vocabularies (not by the seed), so splits generated with different
seeds stay disjoint. Generation is a pure function of (n, split, seed, domains).
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Sequence

from envace.types import Task
from envace.worlds.base import DomainSpec, Shape
from envace.worlds.builder import TaskBuilder
from envace.worlds.registry import domain_names, get_domain

SPLITS = ("train", "val", "test")
HELD_OUT_PER_SHAPE = 2


def held_out_pairs(domains: Sequence[str] | None = None) -> dict[str, set[tuple[str, str]]]:
    """{domain: {(shape, entity)}}. The k-th shape drawing on a vocabulary holds out entities 2k and
    2k+1 of it (mod its size), so shapes sharing a vocabulary hold out different entities."""
    out: dict[str, set[tuple[str, str]]] = {}
    for name in domains or domain_names():
        d = get_domain(name)
        seen: dict[str, int] = {}
        pairs: set[tuple[str, str]] = set()
        for shape in d.shapes:
            k = seen.get(shape.vocab, 0)
            seen[shape.vocab] = k + 1
            vocab = d.vocab[shape.vocab]
            for j in range(HELD_OUT_PER_SHAPE):
                pairs.add((shape.name, vocab[(HELD_OUT_PER_SHAPE * k + j) % len(vocab)]))
        out[name] = pairs
    return out


def _rng(seed: int, split: str, index: int) -> random.Random:
    digest = hashlib.sha256(f"envace-world|{seed}|{split}|{index}".encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


def _pick_keys(shape: Shape, domain: DomainSpec, split: str, held: set[tuple[str, str]],
               rng: random.Random) -> list[str]:
    vocab = list(domain.vocab[shape.vocab])
    own_held = [e for e in vocab if (shape.name, e) in held]
    if split == "test":
        first = rng.choice(own_held)
        rest = [e for e in vocab if e != first]
        return [first] + rng.sample(rest, shape.n_keys - 1)
    allowed = [e for e in vocab if (shape.name, e) not in held]
    return rng.sample(allowed, shape.n_keys)


def generate_task(domain_name: str, shape_name: str, keys: list[str], rng: random.Random, *,
                  uuid: str, meta: dict | None = None) -> Task:
    """One task of a given shape and key entities (used by the generator and by tests)."""
    domain = get_domain(domain_name)
    shape = domain.shape(shape_name)
    builder = TaskBuilder(domain, domain.random_db(rng))
    shape.build(builder, list(keys), rng)
    pairs = [[shape.name, k] for k in keys]
    return builder.build(uuid, {"shape": shape.name, "keys": list(keys), "pairs": pairs, **(meta or {})})


def generate_tasks(n: int, split: str, seed: int, domains: Sequence[str] | None = None) -> list[Task]:
    """`n` tasks of one split, cycling over (domain, shape) so every shape is equally represented.
    Deterministic: the same arguments give the same tasks."""
    if split not in SPLITS:
        raise ValueError(f"split {split!r} is not one of {SPLITS}")
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    names = list(domains) if domains else domain_names()
    held = held_out_pairs(names)
    combos = [(name, shape) for name in names for shape in get_domain(name).shapes]
    tasks: list[Task] = []
    for i in range(n):
        name, shape = combos[i % len(combos)]
        rng = _rng(seed, split, i)
        keys = _pick_keys(shape, get_domain(name), split, held[name], rng)
        tasks.append(generate_task(name, shape.name, keys, rng, uuid=f"{name}-{split}-{seed}-{i:05d}",
                                   meta={"split": split, "seed": seed, "index": i}))
    return tasks


def task_pairs(task: Task) -> set[tuple[str, str]]:
    return {(p[0], p[1]) for p in task.meta.get("pairs", [])}
