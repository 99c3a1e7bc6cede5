"""Export tool-world splits to both training formats: CM2 annotated JSON and verl parquet rows."""

from __future__ import annotations

from pathlib import Path

from envace.data.cm2 import write_cm2
from envace.data.verl_parquet import write_verl_parquet
from envace.worlds.generator import generate_tasks


def export_world(out_dir: str | Path, counts: dict[str, int], seed: int = 0) -> dict[str, dict[str, str | int]]:
    """Write `<out_dir>/<split>.json` (CM2) and `<out_dir>/<split>.parquet` (verl) for each split."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    summary: dict[str, dict[str, str | int]] = {}
    for split, n in counts.items():
        tasks = generate_tasks(n, split, seed)
        write_cm2(tasks, out / f"{split}.json")
        write_verl_parquet(tasks, out / f"{split}.parquet")
        summary[split] = {"tasks": len(tasks), "cm2": str(out / f"{split}.json"),
                          "parquet": str(out / f"{split}.parquet")}
    return summary
