"""CM2 items (a JSON array or JSON lines) -> the verl parquet a verl launch config names
(`envace data export SRC DEST`).

Each item becomes one row in envace's verl layout (verl_parquet.py): the chat up to the first user turn
as `prompt`, the `agent_name` that selects envace's agent loop on verl (`envace_agent`), and in
`extra_info` the full conversation, the item's OpenAI tool schemas (a JSON string), and its checklists.
Every item is checked by the CM2 reader before anything is written, and the writer re-reads its rows,
so a bad item fails with its file, row, uuid and field and leaves no parquet behind.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from envace.data.cm2 import load_cm2
from envace.data.errors import DataError, Problem
from envace.data.verl_parquet import write_verl_parquet

AGENT_NAME = "envace_agent"  # the name envace's verl agent loop registers under (trainers/verl/dataset.py)


def export_verl(src: str | Path, dest: str | Path, *, data_source: str = "cm2",
                agent_name: str = AGENT_NAME) -> dict[str, Any]:
    """Write the CM2 items of `src` to `dest` as verl rows; returns {rows, tools, parquet, ...}."""
    src, dest = Path(src), Path(dest)
    if dest.suffix != ".parquet":
        raise DataError([Problem(str(dest), None, "<file>", "does not end in .parquet",
                                 "name the output <name>.parquet (verl reads parquet files)")])
    if dest.resolve() == src.resolve():
        raise DataError([Problem(str(dest), None, "<file>", "is the input file", "write to another path")])
    tasks = load_cm2(src)
    if not tasks:
        raise DataError([Problem(str(src), None, "<file>", "holds no items", "export a file with CM2 items")])
    write_verl_parquet(tasks, dest, data_source=data_source, agent_name=agent_name)
    return {"source": str(src), "parquet": str(dest.resolve()), "rows": len(tasks), "data_source": data_source,
            "agent_name": agent_name, "tools": sorted({t.get("function", t)["name"] for task in tasks
                                                        for t in task.tools})}
