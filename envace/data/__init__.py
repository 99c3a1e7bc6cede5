"""Training data formats: CM2 annotated items (JSON / JSONL) and verl RL rows (parquet), both
readable into and writable from `envace.types.Task`. Bad rows raise `DataError`.

Public API:
    load_cm2(path) -> list[Task];  write_cm2(tasks, path) -> Path
    to_verl_rows(tasks, data_source=..., agent_name=...) -> list[dict]
    write_verl_parquet(tasks, path) -> Path;  read_verl_parquet(path) -> list[Task]
"""

from envace.data.cm2 import load_cm2, task_to_cm2, write_cm2
from envace.data.errors import DataError, Problem
from envace.data.verl_parquet import read_verl_parquet, to_verl_rows, write_verl_parquet

__all__ = ["load_cm2", "task_to_cm2", "write_cm2", "DataError", "Problem", "read_verl_parquet", "to_verl_rows",
           "write_verl_parquet"]
