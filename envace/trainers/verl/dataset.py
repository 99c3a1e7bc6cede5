"""Data for the verl backend: envace's verl parquet rows (`envace.data.verl_parquet`) as verl's own
`RLHFDataset` hands them to the agent loop, and back into envace `Task`s.

verl loads the parquet with `datasets` and passes each row's columns to the agent loop as keyword
arguments (`raw_prompt`, `extra_info`, `reward_model`, `data_source`, `agent_name`, `uid`, ...). The
loop rebuilds the Task with the same row parser that `read_verl_parquet` uses, so a row that the
exporter wrote is read identically by both backends, and a bad row fails with the file-row-field
message of `DataError`. Values can arrive as numpy arrays (verl's non-tensor batch); they are turned
back into plain lists first.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from envace.data.errors import DataError
from envace.data.verl_export import AGENT_NAME as VERL_AGENT_NAME
from envace.data.verl_parquet import parse_verl_row, write_verl_parquet
from envace.types import Task

# the name the agent loop registers under; rows select it via agent_name (`envace data export` writes it)
AGENT_NAME = VERL_AGENT_NAME


def plain(value: Any) -> Any:
    """numpy arrays / scalars inside a verl sample -> plain Python lists and scalars (recursively)."""
    if hasattr(value, "tolist") and not isinstance(value, (str, bytes)):
        value = value.tolist()
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


def task_from_sample(sample: dict[str, Any]) -> Task:
    """The envace Task of one verl sample (the agent loop's **kwargs). Raises DataError on a bad row."""
    prompt = sample.get("prompt")
    if prompt is None:
        prompt = sample.get("raw_prompt")
    row = {
        "prompt": plain(prompt),
        "data_source": plain(sample.get("data_source")),
        "agent_name": plain(sample.get("agent_name", AGENT_NAME)),
        "extra_info": plain(sample.get("extra_info")),
        "reward_model": plain(sample.get("reward_model", {})),
    }
    index = sample.get("index", -1)
    where = f"verl sample (uid {plain(sample.get('uid'))!r}, data_source {row['data_source']!r})"
    task, problems = parse_verl_row(row, where, int(plain(index)) if index is not None else -1)
    if problems or task is None:
        raise DataError(problems)
    return task


def export_verl_dataset(tasks: list[Task], path: str | Path, data_source: str = "envace_toolworld") -> Path:
    """Write `tasks` as verl rows whose `agent_name` selects the envace agent loop."""
    return write_verl_parquet(tasks, path, data_source=data_source, agent_name=AGENT_NAME)


def load_rlhf_dataset(path: str | Path, tokenizer: Any, **data_config: Any) -> Any:
    """verl's own `RLHFDataset` over envace parquet files, with the settings the launcher uses."""
    from omegaconf import OmegaConf

    from envace.trainers.verl.deps import require

    rl_dataset = require("verl.utils.dataset.rl_dataset")
    files = [str(p) for p in path] if isinstance(path, (list, tuple)) else [str(path)]
    cfg = OmegaConf.create({"prompt_key": "prompt", "return_raw_chat": True, "max_prompt_length": 4096,
                            "filter_overlong_prompts": False, "cache_dir": str(Path(files[0]).parent / ".verl_cache"),
                            **data_config})
    return rl_dataset.RLHFDataset(data_files=files, tokenizer=tokenizer, config=cfg)
